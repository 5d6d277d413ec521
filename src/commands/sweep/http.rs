//! HTTP to the endpoints (plain HTTP/1.1 to loopback, through ureq) and the classification of everything that can
//! go wrong on the way into an [`ErrorClass`]. One fresh connection per request: a crash must not leave a pooled
//! connection behind for the next cell, and curl, the baseline in `bench/sweep_overhead.sh`, connects afresh too.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::api::{self, LineEvent, StreamState};
use crate::run::format::record::{Api, ErrorClass};

/// Largest response body read. A generation of a few thousand tokens is well under 1 MiB even with Ollama's
/// `context` array; 64 MiB means something other than a generation is answering.
pub const BODY_CAP: u64 = 64 << 20;
/// Largest body read from a probe (`/props`, `/api/show`, `/metrics`) or an error response.
pub const PROBE_CAP: u64 = 4 << 20;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timeouts {
    pub connect: Duration,
    /// Longest silence while waiting for response bytes (including the model load before the first token).
    pub read: Duration,
    /// Longest whole request.
    pub total: Duration,
}

/// A failed exchange: its class and what happened, in words.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub class: ErrorClass,
    pub message: String,
}

impl Failure {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Failure { class, message: message.into() }
    }
}

/// One generation request as the client saw it.
#[derive(Clone, Debug)]
pub struct Measurement {
    pub http_status: Option<u16>,
    /// From just before connecting to the end of the body (or to the failure).
    pub wall_ms: f64,
    pub ttft_ms: Option<f64>,
    pub state: StreamState,
    pub body_bytes: u64,
    /// The failure and when it happened (ms after the request started).
    pub failure: Option<(Failure, f64)>,
}

/// What the sweep asks of an endpoint over HTTP. [`HttpClient`] talks TCP; the runner's unit tests script answers.
/// `Send + 'static`: a generation runs on a worker thread while the sweep watches for Ctrl-C.
pub trait Client: Clone + Send + 'static {
    fn timeouts(&self) -> Timeouts;

    /// GET with a shorter overall limit (probes must not wait for a model load); status and capped body.
    fn get(&self, path: &str, limit: Duration) -> Result<(u16, Vec<u8>), Failure>;

    fn post_json(&self, path: &str, body: &Value, limit: Duration) -> Result<(u16, Vec<u8>), Failure>;

    /// Run one generation. `on_first_token` is called once, with the milliseconds since the start, when the first
    /// generated token arrives (streaming only).
    fn generate(&self, api: Api, body: &Value, stream: bool, on_first_token: &mut dyn FnMut(f64)) -> Measurement;

    /// GET a JSON document; non-2xx and non-JSON are failures.
    fn get_json(&self, path: &str, limit: Duration) -> Result<Value, Failure> {
        let (status, body) = self.get(path, limit)?;
        if !(200..300).contains(&status) {
            return Err(Failure::new(
                ErrorClass::HttpStatus,
                format!("GET {path}: HTTP {status}: {}", api::error_message(&body)),
            ));
        }
        serde_json::from_slice(&body)
            .map_err(|e| Failure::new(ErrorClass::InvalidResponse, format!("GET {path}: body is not JSON ({e})")))
    }
}

#[derive(Clone, Debug)]
pub struct HttpClient {
    agent: ureq::Agent,
    pub base: String,
    pub timeouts: Timeouts,
}

impl HttpClient {
    pub fn new(base_url: &str, timeouts: Timeouts) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_idle_connections(0)
            .max_idle_connections_per_host(0)
            .max_redirects(0)
            .user_agent(concat!("backscope/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(timeouts.connect))
            .timeout_per_read(Some(timeouts.read))
            .timeout_global(Some(timeouts.total))
            .build();
        HttpClient { agent: config.into(), base: base_url.trim_end_matches('/').to_string(), timeouts }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Client for HttpClient {
    fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    fn get(&self, path: &str, limit: Duration) -> Result<(u16, Vec<u8>), Failure> {
        let req = self.agent.get(&self.url(path)).config().timeout_global(Some(limit)).build();
        let resp = req.call().map_err(|e| classify(&e))?;
        let status = resp.status().as_u16();
        read_capped(resp, PROBE_CAP).map(|b| (status, b))
    }

    fn post_json(&self, path: &str, body: &Value, limit: Duration) -> Result<(u16, Vec<u8>), Failure> {
        let req = self.agent.post(&self.url(path)).config().timeout_global(Some(limit)).build();
        let resp = req.header("content-type", "application/json").send(body.to_string()).map_err(|e| classify(&e))?;
        let status = resp.status().as_u16();
        read_capped(resp, PROBE_CAP).map(|b| (status, b))
    }

    fn generate(&self, api: Api, body: &Value, stream: bool, on_first_token: &mut dyn FnMut(f64)) -> Measurement {
        let started = Instant::now();
        let ms = || started.elapsed().as_secs_f64() * 1e3;
        let mut m = Measurement {
            http_status: None,
            wall_ms: 0.0,
            ttft_ms: None,
            state: StreamState::new(api),
            body_bytes: 0,
            failure: None,
        };
        let path = api::generate_path(api);
        let payload = body.to_string();
        let sent = self.agent.post(&self.url(path)).header("content-type", "application/json").send(payload);
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                m.wall_ms = ms();
                m.failure = Some((classify(&e), m.wall_ms));
                return m;
            }
        };
        let status = resp.status().as_u16();
        m.http_status = Some(status);
        if !(200..300).contains(&status) {
            let result = read_capped(resp, PROBE_CAP);
            m.wall_ms = ms();
            m.failure = Some(match result {
                Ok(b) => {
                    m.body_bytes = b.len() as u64;
                    (
                        Failure::new(ErrorClass::HttpStatus, format!("HTTP {status}: {}", api::error_message(&b))),
                        m.wall_ms,
                    )
                }
                // The status line came, then the connection broke: say both.
                Err(f) => {
                    (Failure::new(ErrorClass::HttpStatus, format!("HTTP {status}, then {}", f.message)), m.wall_ms)
                }
            });
            return m;
        }
        let reader = resp.into_body().into_with_config().limit(BODY_CAP).reader();
        let outcome =
            if stream { read_stream(reader, &mut m, &started, on_first_token) } else { read_whole(reader, &mut m) };
        m.wall_ms = ms();
        if let Err(f) = outcome {
            m.failure = Some((f, m.wall_ms));
        }
        m
    }
}

fn read_capped(resp: ureq::http::Response<ureq::Body>, cap: u64) -> Result<Vec<u8>, Failure> {
    let mut out = Vec::new();
    resp.into_body()
        .into_with_config()
        .limit(cap)
        .reader()
        .read_to_end(&mut out)
        .map_err(|e| classify_io(e, "reading the body"))?;
    Ok(out)
}

fn read_stream(
    reader: impl Read,
    m: &mut Measurement,
    started: &Instant,
    on_first_token: &mut dyn FnMut(f64),
) -> Result<(), Failure> {
    let mut r = BufReader::with_capacity(64 << 10, reader);
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        let n = r.read_until(b'\n', &mut line).map_err(|e| {
            let f = classify_io(e, "reading the stream");
            // A body cut off by a crash after some tokens: say how far it got.
            Failure::new(f.class, format!("{} after {} token chunks", f.message, m.state.token_chunks))
        })?;
        if n == 0 {
            break;
        }
        m.body_bytes += n as u64;
        let text = String::from_utf8_lossy(trim_newline(&line));
        match m.state.feed(&text) {
            Ok(LineEvent::Token) => {
                if m.ttft_ms.is_none() {
                    let t = started.elapsed().as_secs_f64() * 1e3;
                    m.ttft_ms = Some(t);
                    on_first_token(t);
                }
            }
            Ok(LineEvent::Final) => {
                if m.ttft_ms.is_none() && m.state.token_chunks > 0 {
                    m.ttft_ms = Some(started.elapsed().as_secs_f64() * 1e3);
                }
            }
            Ok(LineEvent::Nothing) => {}
            Ok(LineEvent::Error(msg)) => return Err(Failure::new(ErrorClass::ServerError, msg)),
            Err(msg) => return Err(Failure::new(ErrorClass::InvalidResponse, msg)),
        }
    }
    if !m.state.is_final() {
        return Err(Failure::new(
            ErrorClass::Eof,
            format!("the stream ended without a final chunk after {} token chunks", m.state.token_chunks),
        ));
    }
    Ok(())
}

fn read_whole(mut reader: impl Read, m: &mut Measurement) -> Result<(), Failure> {
    let mut body = Vec::new();
    reader.read_to_end(&mut body).map_err(|e| classify_io(e, "reading the body"))?;
    m.body_bytes = body.len() as u64;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Failure::new(ErrorClass::Eof, "empty response body"));
    }
    match m.state.feed_whole(&body) {
        Ok(LineEvent::Error(msg)) => Err(Failure::new(ErrorClass::ServerError, msg)),
        Ok(_) if m.state.is_final() => Ok(()),
        Ok(_) => Err(Failure::new(ErrorClass::InvalidResponse, "the body is JSON but not a completed generation")),
        Err(msg) => Err(Failure::new(ErrorClass::InvalidResponse, msg)),
    }
}

fn trim_newline(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

/// The class of a ureq error.
pub fn classify(e: &ureq::Error) -> Failure {
    use ureq::Timeout as T;
    let class = match e {
        ureq::Error::Timeout(T::Connect | T::Resolve) => ErrorClass::ConnectTimeout,
        ureq::Error::Timeout(T::PerRead | T::RecvResponse) => ErrorClass::ReadTimeout,
        ureq::Error::Timeout(_) => ErrorClass::TotalTimeout,
        ureq::Error::Io(io) => return io_failure(io),
        ureq::Error::Protocol(_) | ureq::Error::Http(_) => ErrorClass::Protocol,
        ureq::Error::LargeResponseHeader(..) => ErrorClass::Oversize,
        ureq::Error::BodyExceedsLimit(_) => ErrorClass::Oversize,
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed | ureq::Error::BadUri(_) => {
            ErrorClass::ConnectionRefused
        }
        ureq::Error::BodyStalled => ErrorClass::Eof,
        ureq::Error::StatusCode(_) => ErrorClass::HttpStatus,
        _ => ErrorClass::Protocol,
    };
    Failure::new(class, e.to_string())
}

fn io_failure(io: &std::io::Error) -> Failure {
    use std::io::ErrorKind as K;
    let class = match io.kind() {
        K::ConnectionRefused => ErrorClass::ConnectionRefused,
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => ErrorClass::ConnectionReset,
        K::UnexpectedEof => ErrorClass::Eof,
        K::TimedOut | K::WouldBlock => ErrorClass::ReadTimeout,
        _ => ErrorClass::ConnectionReset,
    };
    let what = match class {
        ErrorClass::Eof => "the connection closed early",
        ErrorClass::ConnectionReset => "the connection was reset",
        ErrorClass::ConnectionRefused => "connection refused",
        _ => "I/O error",
    };
    Failure::new(class, format!("{what} ({io})"))
}

/// The class of an error from a body reader: ureq wraps its own errors (timeouts, limit, protocol) in io errors.
pub fn classify_io(e: std::io::Error, doing: &str) -> Failure {
    let f = match ureq::Error::from(e) {
        ureq::Error::Io(io) => io_failure(&io),
        other => classify(&other),
    };
    Failure::new(f.class, format!("{doing}: {}", f.message))
}

/// Find out which API an external endpoint speaks, and what it says about itself. llama-server answers `/props`;
/// Ollama answers `/api/version`; other OpenAI-compatible servers answer `/v1/models`. The first transport
/// failure (refused, reset, garbage) ends the probe: every later path would fail the same way.
pub fn detect_api(client: &impl Client, limit: Duration) -> Result<(Api, Map<String, Value>), Failure> {
    let mut seen = Vec::new();
    for (path, api) in [
        ("/props", Api::LlamaCpp),
        ("/api/version", Api::Ollama),
        ("/health", Api::LlamaCpp),
        ("/v1/models", Api::OpenAi),
    ] {
        let (status, body) =
            client.get(path, limit).map_err(|f| Failure::new(f.class, format!("probing GET {path}: {}", f.message)))?;
        let json: Option<Value> = serde_json::from_slice(&body).ok();
        let recognised = (200..300).contains(&status)
            && match (path, &json) {
                ("/props", Some(v)) => v.get("default_generation_settings").is_some() || v.get("build_info").is_some(),
                ("/api/version", Some(v)) => v.get("version").and_then(Value::as_str).is_some(),
                ("/health", Some(v)) => v.get("status").is_some(),
                ("/v1/models", Some(v)) => v.get("data").is_some(),
                _ => false,
            };
        if recognised {
            let mut info = Map::new();
            match api {
                Api::LlamaCpp if path == "/props" => {
                    info = api::llamacpp_props_summary(json.as_ref().unwrap_or(&Value::Null))
                }
                Api::Ollama => {
                    if let Some(v) = json.as_ref().and_then(|j| j.get("version")) {
                        info.insert("version".into(), v.clone());
                    }
                }
                _ => {}
            }
            info.insert("detected_by".into(), format!("GET {path}").into());
            return Ok((api, info));
        }
        let what = match (&json, status) {
            (_, s) if !(200..300).contains(&s) => format!("HTTP {s}"),
            (None, s) => format!("HTTP {s} with a body that is not JSON ({} bytes)", body.len()),
            (Some(_), s) => format!("HTTP {s} with JSON that is not this API's"),
        };
        seen.push(format!("GET {path}: {what}"));
    }
    Err(Failure::new(
        ErrorClass::InvalidResponse,
        format!(
            "no Ollama, llama-server or OpenAI-compatible API recognised ({}); set `api` for this endpoint",
            seen.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A one-shot TCP peer on 127.0.0.1 that reads the request head and then does `act` with the socket.
    fn peer(act: impl FnOnce(std::net::TcpStream) + Send + 'static) -> String {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                let mut buf = [0u8; 65536];
                let mut got = Vec::new();
                // Read until the end of the request (head + small JSON body), bounded.
                for _ in 0..100 {
                    match std::io::Read::read(&mut s, &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                    if let Some(head_end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if got.len() >= head_end + 4 + len {
                            break;
                        }
                    }
                }
                act(s);
            }
        });
        format!("http://{addr}")
    }

    fn client(url: &str) -> HttpClient {
        HttpClient::new(
            url,
            Timeouts {
                connect: Duration::from_secs(2),
                read: Duration::from_millis(500),
                total: Duration::from_secs(5),
            },
        )
    }

    fn generate(url: &str, api: Api, stream: bool) -> Measurement {
        client(url).generate(api, &serde_json::json!({"prompt": "x"}), stream, &mut |_| {})
    }

    fn class(m: &Measurement) -> ErrorClass {
        m.failure.as_ref().map(|(f, _)| f.class).unwrap_or_else(|| panic!("expected a failure, got {m:?}"))
    }

    #[test]
    fn accept_then_close_is_eof() {
        let url = peer(drop);
        let m = generate(&url, Api::LlamaCpp, true);
        assert!(matches!(class(&m), ErrorClass::Eof | ErrorClass::ConnectionReset), "{m:?}");
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let url = peer(|mut s| {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\nnot http at all\r\n");
        });
        assert_eq!(class(&generate(&url, Api::LlamaCpp, true)), ErrorClass::Protocol);
    }

    #[test]
    fn invalid_json_with_200_is_an_invalid_response() {
        let url = peer(|mut s| {
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"a\": tru",
            );
        });
        let m = generate(&url, Api::Ollama, false);
        assert_eq!(class(&m), ErrorClass::InvalidResponse);
        assert_eq!(m.http_status, Some(200));
    }

    #[test]
    fn a_huge_body_hits_the_cap() {
        let url = peer(|mut s| {
            let _ = s.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", BODY_CAP * 4).as_bytes());
            let chunk = vec![b'{'; 1 << 20];
            for _ in 0..(BODY_CAP >> 20) + 8 {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        assert_eq!(class(&generate(&url, Api::Ollama, false)), ErrorClass::Oversize);
    }

    #[test]
    fn silence_is_a_read_timeout_and_a_cut_stream_is_eof() {
        let url = peer(|s| {
            std::thread::sleep(Duration::from_secs(2));
            drop(s);
        });
        let m = generate(&url, Api::LlamaCpp, true);
        assert_eq!(class(&m), ErrorClass::ReadTimeout);
        assert!(m.wall_ms >= 450.0 && m.wall_ms < 2000.0, "{}", m.wall_ms);
        let url = peer(|mut s| {
            let chunk = "data: {\"content\":\"a\",\"stop\":false}\n\n";
            let _ = s.write_all(format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes());
            // Close without the terminating chunk, as a crashed server does.
        });
        let m = generate(&url, Api::LlamaCpp, true);
        assert_eq!(class(&m), ErrorClass::Eof, "{m:?}");
        assert!(m.ttft_ms.is_some(), "the token before the cut was seen");
    }

    #[test]
    fn http_500_keeps_the_error_body() {
        let url = peer(|mut s| {
            let body = r#"{"error":"llama runner process has terminated: signal: segmentation fault"}"#;
            let _ = s.write_all(format!("HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
        });
        let m = generate(&url, Api::Ollama, true);
        let (f, _) = m.failure.clone().unwrap();
        assert_eq!(f.class, ErrorClass::HttpStatus);
        assert_eq!(m.http_status, Some(500));
        assert!(f.message.contains("signal: segmentation fault"), "{}", f.message);
    }

    #[test]
    fn nothing_listening_is_connection_refused() {
        let port = super::super::supervise::free_port().unwrap();
        let m = generate(&format!("http://127.0.0.1:{port}"), Api::Ollama, true);
        assert_eq!(class(&m), ErrorClass::ConnectionRefused);
    }

    #[test]
    fn a_complete_ollama_stream() {
        let url = peer(|mut s| {
            let lines = "{\"model\":\"m\",\"response\":\"Hi\",\"done\":false}\n{\"model\":\"m\",\"response\":\"\",\"done\":true,\"total_duration\":2000000,\"eval_count\":1,\"eval_duration\":1000000}\n";
            let _ = s.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n\r\n{lines}",
                    lines.len()
                )
                .as_bytes(),
            );
        });
        let mut first = None;
        let m = client(&url).generate(Api::Ollama, &serde_json::json!({}), true, &mut |t| first = Some(t));
        assert!(m.failure.is_none(), "{m:?}");
        assert_eq!(m.state.timings.total_ms, Some(2.0));
        assert_eq!(first, m.ttft_ms);
    }
}
