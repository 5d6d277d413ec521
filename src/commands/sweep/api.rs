//! Request bodies and response parsing for the three generation APIs, without any I/O: Ollama `/api/generate`
//! (NDJSON stream or one object), llama-server `/completion` (server-sent events or one object) and the
//! OpenAI-compatible `/v1/completions` fallback. Field names follow the servers' sources: Ollama `api/types.go`,
//! llama.cpp `tools/server/server-task.cpp` and `server-common.cpp`.
//!
//! Streams are fed line by line to [`StreamState::feed`]; a whole (non-streamed) body goes to
//! [`StreamState::feed_whole`]. Either way [`StreamState::is_final`] says whether the response completed.

pub use crate::output::text::truncate;
use serde_json::{Map, Value};

use crate::run::format::record::{Api, ServerTimings};

/// What one generation request asks for.
#[derive(Clone, Debug)]
pub struct GenParams<'a> {
    pub model: &'a str,
    pub prompt: &'a str,
    pub num_predict: i64,
    /// Layers to offload. Sent per request to Ollama only (`options.num_gpu`); llama-server takes `-ngl` at start.
    /// -1 is not sent: the runtime decides, which is also what Ollama does when it is absent.
    pub num_gpu: i64,
    pub temperature: f64,
    pub seed: i64,
    pub stream: bool,
    /// Pass-through sampling/runner options: Ollama `options`, top-level fields for llama.cpp and OpenAI.
    pub options: &'a Map<String, Value>,
    /// Pass-through top-level request fields (`raw`, `keep_alive`, `think`, …).
    pub request: &'a Map<String, Value>,
}

pub fn generate_path(api: Api) -> &'static str {
    match api {
        Api::Ollama => "/api/generate",
        Api::LlamaCpp => "/completion",
        Api::OpenAi => "/v1/completions",
    }
}

/// The JSON body of a generation request. Pass-through options override backscope's defaults, so a user can
/// set e.g. `cache_prompt=true` or a different `temperature` explicitly.
pub fn request_body(api: Api, p: &GenParams<'_>) -> Value {
    let mut body = Map::new();
    match api {
        Api::Ollama => {
            let mut options = Map::new();
            options.insert("num_predict".into(), p.num_predict.into());
            options.insert("temperature".into(), p.temperature.into());
            options.insert("seed".into(), p.seed.into());
            if p.num_gpu >= 0 {
                options.insert("num_gpu".into(), p.num_gpu.into());
            }
            options.extend(p.options.clone());
            body.insert("model".into(), p.model.into());
            body.insert("prompt".into(), p.prompt.into());
            body.insert("stream".into(), p.stream.into());
            body.insert("options".into(), Value::Object(options));
        }
        Api::LlamaCpp => {
            body.insert("prompt".into(), p.prompt.into());
            body.insert("n_predict".into(), p.num_predict.into());
            body.insert("temperature".into(), p.temperature.into());
            body.insert("seed".into(), p.seed.into());
            body.insert("stream".into(), p.stream.into());
            // Every repetition should evaluate the whole prompt, so prompt tokens/s compares like with like.
            // Ollama always caches (it sends cache_prompt=true to its runner), which the record flags.
            body.insert("cache_prompt".into(), false.into());
            body.extend(p.options.clone());
        }
        Api::OpenAi => {
            body.insert("model".into(), p.model.into());
            body.insert("prompt".into(), p.prompt.into());
            body.insert("max_tokens".into(), p.num_predict.into());
            body.insert("temperature".into(), p.temperature.into());
            body.insert("seed".into(), p.seed.into());
            body.insert("stream".into(), p.stream.into());
            if p.stream {
                body.insert("stream_options".into(), serde_json::json!({"include_usage": true}));
            }
            body.extend(p.options.clone());
        }
    }
    body.extend(p.request.clone());
    Value::Object(body)
}

/// What one line of a stream carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineEvent {
    /// Nothing countable: keep-alive, SSE comment, an empty chunk.
    Nothing,
    /// Generated text (or thinking) arrived.
    Token,
    /// The final chunk, with the server's timings.
    Final,
    /// The server reported an error inside the stream.
    Error(String),
}

/// Accumulates a streamed (or whole) response.
#[derive(Clone, Debug)]
pub struct StreamState {
    api: Api,
    pub token_chunks: u64,
    pub response_chars: u64,
    pub timings: ServerTimings,
    final_seen: bool,
    done_marker: bool,
    pub error: Option<String>,
}

impl StreamState {
    pub fn new(api: Api) -> Self {
        StreamState {
            api,
            token_chunks: 0,
            response_chars: 0,
            timings: ServerTimings::default(),
            final_seen: false,
            done_marker: false,
            error: None,
        }
    }

    /// The response completed: Ollama `done: true`, llama.cpp `stop: true`, or OpenAI `finish_reason`/`[DONE]`.
    pub fn is_final(&self) -> bool {
        self.final_seen || (self.api == Api::OpenAi && self.done_marker)
    }

    /// Feed one line of a stream (without its line terminator). `Err` means the line is not what the API sends.
    pub fn feed(&mut self, line: &str) -> Result<LineEvent, String> {
        let line = line.strip_suffix('\r').unwrap_or(line);
        match self.api {
            Api::Ollama => {
                if line.trim().is_empty() {
                    return Ok(LineEvent::Nothing);
                }
                let v: Value = serde_json::from_str(line).map_err(|e| format!("NDJSON line is not JSON ({e})"))?;
                self.chunk(&v)
            }
            Api::LlamaCpp | Api::OpenAi => {
                // Server-sent events: `data: …` carries a chunk; blank lines end events; `:` lines are comments
                // (llama-server sends `:` pings on long silences); event/id/retry fields carry nothing we use.
                if line.is_empty() || line.starts_with(':') {
                    return Ok(LineEvent::Nothing);
                }
                if let Some(data) = line.strip_prefix("data:") {
                    let data = data.trim_start();
                    if data == "[DONE]" {
                        self.done_marker = true;
                        return Ok(if self.is_final() { LineEvent::Final } else { LineEvent::Nothing });
                    }
                    let v: Value =
                        serde_json::from_str(data).map_err(|e| format!("server-sent event data is not JSON ({e})"))?;
                    return self.chunk(&v);
                }
                if ["event:", "id:", "retry:"].iter().any(|p| line.starts_with(p)) {
                    return Ok(LineEvent::Nothing);
                }
                // llama-server answers some errors with a JSON body even when a stream was asked for.
                if line.starts_with('{') {
                    let v: Value = serde_json::from_str(line).map_err(|e| format!("body line is not JSON ({e})"))?;
                    return self.chunk(&v);
                }
                Err(format!("not a server-sent event line: {:?}", truncate(line, 120)))
            }
        }
    }

    /// Feed a whole non-streamed body.
    pub fn feed_whole(&mut self, body: &[u8]) -> Result<LineEvent, String> {
        let v: Value = serde_json::from_slice(body).map_err(|e| format!("response body is not JSON ({e})"))?;
        self.chunk(&v)
    }

    fn chunk(&mut self, v: &Value) -> Result<LineEvent, String> {
        let Some(obj) = v.as_object() else {
            return Err(format!("expected a JSON object, got {}", type_name(v)));
        };
        if let Some(e) = obj.get("error") {
            let msg = error_text(e);
            self.error = Some(msg.clone());
            return Ok(LineEvent::Error(msg));
        }
        match self.api {
            Api::Ollama => self.ollama_chunk(obj),
            Api::LlamaCpp => self.llamacpp_chunk(obj),
            Api::OpenAi => self.openai_chunk(obj),
        }
    }

    fn ollama_chunk(&mut self, obj: &Map<String, Value>) -> Result<LineEvent, String> {
        let Some(done) = obj.get("done").and_then(Value::as_bool) else {
            return Err("Ollama chunk without a boolean `done`".into());
        };
        // Thinking models stream their reasoning in `thinking` before `response`; both are generated tokens.
        let text = str_len(obj.get("response")) + str_len(obj.get("thinking"));
        self.response_chars += text;
        if done {
            let ns = |k: &str| obj.get(k).and_then(Value::as_u64).map(|v| v as f64 / 1e6);
            let n = |k: &str| obj.get(k).and_then(Value::as_u64);
            self.timings = ServerTimings {
                total_ms: ns("total_duration"),
                load_ms: ns("load_duration"),
                prompt_ms: ns("prompt_eval_duration"),
                prompt_n: n("prompt_eval_count"),
                cache_n: None,
                decode_ms: ns("eval_duration"),
                decode_n: n("eval_count"),
                stop_reason: obj.get("done_reason").and_then(Value::as_str).map(str::to_string),
            };
            return Ok(self.count_chunk(text > 0, true));
        }
        Ok(self.count_chunk(text > 0, false))
    }

    /// Count a chunk that carried text and say what it was: the final one (which may also carry text), a token,
    /// or neither (keep-alive, metadata).
    fn count_chunk(&mut self, has_text: bool, is_final: bool) -> LineEvent {
        if has_text {
            self.token_chunks += 1;
        }
        if is_final {
            self.final_seen = true;
            LineEvent::Final
        } else if has_text {
            LineEvent::Token
        } else {
            LineEvent::Nothing
        }
    }

    fn llamacpp_chunk(&mut self, obj: &Map<String, Value>) -> Result<LineEvent, String> {
        let text = str_len(obj.get("content"));
        self.response_chars += text;
        // A token can be an incomplete UTF-8 sequence: then `content` is empty but `tokens` is not.
        let has_token = text > 0 || obj.get("tokens").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
        let stop = obj.get("stop").and_then(Value::as_bool);
        if stop.is_none() && !obj.contains_key("content") {
            return Err("llama.cpp chunk without `content` or `stop`".into());
        }
        if stop == Some(true) {
            self.timings = llamacpp_timings(obj.get("timings"));
            self.timings.stop_reason = obj.get("stop_type").and_then(Value::as_str).map(str::to_string);
            if self.timings.prompt_n.is_none() {
                self.timings.prompt_n = obj.get("tokens_evaluated").and_then(Value::as_u64);
            }
            if self.timings.decode_n.is_none() {
                self.timings.decode_n = obj.get("tokens_predicted").and_then(Value::as_u64);
            }
            if self.timings.cache_n.is_none() {
                self.timings.cache_n = obj.get("tokens_cached").and_then(Value::as_u64);
            }
            return Ok(self.count_chunk(has_token, true));
        }
        Ok(self.count_chunk(has_token, false))
    }

    fn openai_chunk(&mut self, obj: &Map<String, Value>) -> Result<LineEvent, String> {
        let choices = obj.get("choices").and_then(Value::as_array);
        if choices.is_none() && !obj.contains_key("usage") {
            return Err("OpenAI completion chunk without `choices`".into());
        }
        let first = choices.and_then(|c| c.first());
        let text = str_len(first.and_then(|c| c.get("text")));
        self.response_chars += text;
        if let Some(t) = obj.get("timings") {
            let reason = self.timings.stop_reason.take();
            self.timings = llamacpp_timings(Some(t));
            self.timings.stop_reason = reason;
        }
        if let Some(u) = obj.get("usage").and_then(Value::as_object) {
            self.timings.prompt_n = self.timings.prompt_n.or(u.get("prompt_tokens").and_then(Value::as_u64));
            self.timings.decode_n = self.timings.decode_n.or(u.get("completion_tokens").and_then(Value::as_u64));
            if let Some(c) = u.get("prompt_tokens_details").and_then(|d| d.get("cached_tokens")).and_then(Value::as_u64)
            {
                self.timings.cache_n = Some(c);
            }
        }
        if let Some(reason) = first.and_then(|c| c.get("finish_reason")).and_then(Value::as_str) {
            self.timings.stop_reason = Some(reason.to_string());
            return Ok(self.count_chunk(text > 0, true));
        }
        Ok(self.count_chunk(text > 0, false))
    }
}

/// llama.cpp `timings`: `prompt_n, prompt_ms, predicted_n, predicted_ms, cache_n` (server-common.cpp). Its total
/// is the sum of the two phases (what the server logs as `total time`).
fn llamacpp_timings(t: Option<&Value>) -> ServerTimings {
    let Some(t) = t.and_then(Value::as_object) else { return ServerTimings::default() };
    let f = |k: &str| t.get(k).and_then(Value::as_f64);
    let n = |k: &str| t.get(k).and_then(Value::as_u64);
    let prompt_ms = f("prompt_ms");
    let decode_ms = f("predicted_ms");
    ServerTimings {
        total_ms: match (prompt_ms, decode_ms) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        },
        load_ms: None,
        prompt_ms,
        prompt_n: n("prompt_n"),
        cache_n: n("cache_n"),
        decode_ms,
        decode_n: n("predicted_n"),
        stop_reason: None,
    }
}

fn str_len(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_str).map(|s| s.chars().count() as u64).unwrap_or(0)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The text of an `error` field: Ollama sends a string, llama.cpp an object with `message`.
fn error_text(e: &Value) -> String {
    match e {
        Value::String(s) => s.clone(),
        Value::Object(o) => o
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| Value::Object(o.clone()).to_string()),
        other => other.to_string(),
    }
}

/// The message of a non-2xx response body: its JSON `error`, else the text itself (shortened).
pub fn error_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(e) = v.get("error") {
            return truncate(&error_text(e), 500);
        }
    }
    truncate(String::from_utf8_lossy(body).trim(), 500)
}

/// A fatal signal named in a message. Ollama reports a runner crash as Go's `signal: segmentation fault`
/// (`llm/llama_server.go`, `llm/status.go`); C runtimes and shells print `Segmentation fault`; Go's runtime
/// prints `SIGSEGV: segmentation violation`.
pub fn signal_in_text(text: &str) -> Option<&'static str> {
    const NAMES: &[(&str, &str)] = &[
        ("SIGSEGV", "SIGSEGV"),
        ("segmentation fault", "SIGSEGV"),
        ("segmentation violation", "SIGSEGV"),
        ("SIGABRT", "SIGABRT"),
        ("signal: aborted", "SIGABRT"),
        ("SIGBUS", "SIGBUS"),
        ("signal: bus error", "SIGBUS"),
        ("SIGILL", "SIGILL"),
        ("signal: illegal instruction", "SIGILL"),
        ("SIGFPE", "SIGFPE"),
        ("signal: floating point exception", "SIGFPE"),
        ("signal: killed", "SIGKILL"),
    ];
    let lower = text.to_ascii_lowercase();
    NAMES.iter().find(|(needle, _)| lower.contains(&needle.to_ascii_lowercase())).map(|(_, name)| *name)
}

/// Prometheus text exposition (llama-server `/metrics`) as name → value; comments and labelled series skipped.
pub fn parse_metrics(text: &str) -> Map<String, Value> {
    let mut out = Map::new();
    for line in text.lines().take(10_000) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.contains('{') {
            continue;
        }
        let mut parts = line.split_whitespace();
        if let (Some(name), Some(value)) = (parts.next(), parts.next()) {
            if let Ok(v) = value.parse::<f64>() {
                if let Some(n) = serde_json::Number::from_f64(v) {
                    out.insert(name.to_string(), Value::Number(n));
                }
            }
        }
    }
    out
}

/// The `/api/ps` entry for a model: where it is loaded and how much of it sits in VRAM.
pub fn ollama_ps_entry(ps: &Value, model: &str) -> Option<Map<String, Value>> {
    let models = ps.get("models")?.as_array()?;
    let with_tag = if model.contains(':') { model.to_string() } else { format!("{model}:latest") };
    let m = models.iter().find(|m| {
        let name = m.get("name").and_then(Value::as_str).unwrap_or("");
        let mdl = m.get("model").and_then(Value::as_str).unwrap_or("");
        name == model || mdl == model || name == with_tag || mdl == with_tag
    })?;
    let mut out = Map::new();
    for k in ["name", "size", "size_vram", "context_length", "expires_at"] {
        if let Some(v) = m.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    if let (Some(size), Some(vram)) =
        (m.get("size").and_then(Value::as_u64), m.get("size_vram").and_then(Value::as_u64))
    {
        if size > 0 {
            out.insert("vram_fraction".into(), (vram as f64 / size as f64).into());
        }
    }
    if let Some(q) = m.get("details").and_then(|d| d.get("quantization_level")) {
        out.insert("quantization_level".into(), q.clone());
    }
    Some(out)
}

/// The facts of `/api/show` worth keeping per model: details and the architecture keys of `model_info`.
pub fn ollama_show_summary(show: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(d) = show.get("details") {
        out.insert("details".into(), d.clone());
    }
    if let Some(info) = show.get("model_info").and_then(Value::as_object) {
        let arch = info.get("general.architecture").and_then(Value::as_str).unwrap_or("").to_string();
        for (k, v) in info {
            let keep = k.starts_with("general.")
                || (!arch.is_empty() && (k.ends_with(".block_count") || k.ends_with(".context_length")));
            if keep && !v.is_array() {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

/// The facts of llama-server `/props` worth keeping: build, model path, slots, context size.
pub fn llamacpp_props_summary(props: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for k in ["build_info", "model_path", "total_slots", "model_alias"] {
        if let Some(v) = props.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    if let Some(n) = props.get("default_generation_settings").and_then(|d| d.get("n_ctx")) {
        out.insert("n_ctx".into(), n.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params<'a>(opts: &'a Map<String, Value>, req: &'a Map<String, Value>, num_gpu: i64) -> GenParams<'a> {
        GenParams {
            model: "qwen3.5:2b",
            prompt: "Why is the sky blue?",
            num_predict: 512,
            num_gpu,
            temperature: 0.0,
            seed: 42,
            stream: true,
            options: opts,
            request: req,
        }
    }

    #[test]
    fn ollama_gets_num_gpu_per_request_and_none_for_minus_one() {
        let (o, r) = (Map::new(), Map::new());
        let b = request_body(Api::Ollama, &params(&o, &r, 2));
        assert_eq!(b["options"]["num_gpu"], 2);
        assert_eq!(b["options"]["num_predict"], 512);
        assert_eq!(b["options"]["temperature"], 0.0);
        assert_eq!(b["options"]["seed"], 42);
        assert_eq!(b["stream"], true);
        let b = request_body(Api::Ollama, &params(&o, &r, -1));
        assert!(b["options"].get("num_gpu").is_none(), "-1 leaves the decision to Ollama");
    }

    #[test]
    fn pass_through_overrides_defaults_and_llamacpp_never_gets_num_gpu() {
        let mut o = Map::new();
        o.insert("temperature".into(), 0.7.into());
        o.insert("cache_prompt".into(), true.into());
        let mut r = Map::new();
        r.insert("raw".into(), true.into());
        let b = request_body(Api::LlamaCpp, &params(&o, &r, 3));
        assert_eq!(b["temperature"], 0.7);
        assert_eq!(b["cache_prompt"], true);
        assert_eq!(b["n_predict"], 512);
        assert_eq!(b["raw"], true);
        assert!(b.get("num_gpu").is_none() && b.get("n_gpu_layers").is_none());
        let b = request_body(Api::Ollama, &params(&o, &r, 3));
        assert_eq!(b["options"]["temperature"], 0.7);
        assert_eq!(b["raw"], true);
        let b = request_body(Api::OpenAi, &params(&o, &r, 3));
        assert_eq!(b["max_tokens"], 512);
        assert_eq!(b["stream_options"]["include_usage"], true);
    }

    #[test]
    fn llamacpp_sse_stream_with_pings_and_final_timings() {
        // Chunk shapes as llama-server 11434 writes them (server-task.cpp, format_oai_sse in server-common.cpp).
        let lines = [
            r#"data: {"index":0,"content":"Hel","tokens":[123],"stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":5}"#,
            "",
            ":",
            "",
            r#"data: {"index":0,"content":"","tokens":[200],"stop":false,"id_slot":0,"tokens_predicted":2,"tokens_evaluated":5}"#,
            "",
            r#"data: {"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"m","tokens_predicted":2,"tokens_evaluated":5,"stop_type":"limit","tokens_cached":6,"timings":{"cache_n":0,"prompt_n":5,"prompt_ms":12.5,"prompt_per_token_ms":2.5,"prompt_per_second":400.0,"predicted_n":2,"predicted_ms":4.0,"predicted_per_token_ms":2.0,"predicted_per_second":500.0}}"#,
            "",
        ];
        let mut s = StreamState::new(Api::LlamaCpp);
        let events: Vec<LineEvent> = lines.iter().map(|l| s.feed(l).unwrap()).collect();
        assert_eq!(events[0], LineEvent::Token);
        assert_eq!(events[4], LineEvent::Token, "a token with no complete character still counts");
        assert_eq!(events[6], LineEvent::Final);
        assert!(s.is_final());
        assert_eq!(s.token_chunks, 2);
        assert_eq!(s.response_chars, 3);
        let t = &s.timings;
        assert_eq!((t.prompt_n, t.cache_n, t.decode_n), (Some(5), Some(0), Some(2)));
        assert_eq!((t.prompt_ms, t.decode_ms, t.total_ms), (Some(12.5), Some(4.0), Some(16.5)));
        assert_eq!(t.stop_reason.as_deref(), Some("limit"));
    }

    #[test]
    fn errors_inside_streams_and_garbage_lines() {
        let mut s = StreamState::new(Api::LlamaCpp);
        let e = s.feed(r#"data: {"error":{"code":500,"message":"failed to decode","type":"server_error"}}"#).unwrap();
        assert_eq!(e, LineEvent::Error("failed to decode".into()));
        assert!(s.feed("HTTP/1.1 200 OK garbage").is_err());
        assert!(s.feed("data: {not json").is_err());
        let mut o = StreamState::new(Api::Ollama);
        assert_eq!(
            o.feed(r#"{"error":"llama runner process has terminated: signal: segmentation fault"}"#).unwrap(),
            LineEvent::Error("llama runner process has terminated: signal: segmentation fault".into())
        );
        assert!(o.feed(r#"{"model":"x"}"#).is_err(), "a chunk without done is not Ollama's");
        assert!(o.feed("[1,2]").is_err());
    }

    #[test]
    fn openai_stream_with_usage_and_done_marker() {
        let mut s = StreamState::new(Api::OpenAi);
        assert_eq!(
            s.feed(r#"data: {"choices":[{"text":"Hi","index":0,"finish_reason":null}],"object":"text_completion"}"#)
                .unwrap(),
            LineEvent::Token
        );
        assert_eq!(
            s.feed(r#"data: {"choices":[{"text":"","index":0,"finish_reason":"length"}]}"#).unwrap(),
            LineEvent::Final
        );
        assert_eq!(s.feed(r#"data: {"choices":[],"usage":{"completion_tokens":2,"prompt_tokens":5,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":1}}}"#).unwrap(), LineEvent::Nothing);
        assert_eq!(s.feed("data: [DONE]").unwrap(), LineEvent::Final);
        assert_eq!((s.timings.prompt_n, s.timings.decode_n, s.timings.cache_n), (Some(5), Some(2), Some(1)));
        assert_eq!(s.timings.stop_reason.as_deref(), Some("length"));
    }

    #[test]
    fn error_messages_and_signals_from_bodies() {
        assert_eq!(
            error_message(br#"{"error":"model runner has unexpectedly stopped"}"#),
            "model runner has unexpectedly stopped"
        );
        assert_eq!(
            error_message(br#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#),
            "Loading model"
        );
        assert_eq!(error_message(b"  plain text  "), "plain text");
        assert_eq!(signal_in_text("llama runner process has terminated: signal: segmentation fault"), Some("SIGSEGV"));
        assert_eq!(
            signal_in_text(r#"msg="llama-server terminated" error="signal: aborted" exit=unknown"#),
            Some("SIGABRT")
        );
        assert_eq!(signal_in_text("SIGSEGV: segmentation violation"), Some("SIGSEGV"));
        assert_eq!(signal_in_text("llama runner process has terminated: exit status 2"), None);
    }

    #[test]
    fn prometheus_metrics_keep_plain_series() {
        let text = "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 10\nllamacpp:tokens_predicted_seconds_total 0.5\nsomething{label=\"x\"} 3\n";
        let m = parse_metrics(text);
        assert_eq!(m["llamacpp:prompt_tokens_total"], 10.0);
        assert_eq!(m["llamacpp:tokens_predicted_seconds_total"], 0.5);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn truncation_is_by_characters() {
        assert_eq!(truncate("ααααα", 3), "ααα…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
