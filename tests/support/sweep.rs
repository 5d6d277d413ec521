//! Helpers for the sweep tests: the real llama.cpp build and a synthesized model, running `backscope sweep --json`
//! while reading its events, a traced sweep of a protocol stand-in server that runs a HIP program per request, and
//! protocol-fault injectors (TCP peers on 127.0.0.1 that misbehave on purpose; they imitate no server, they break HTTP
//! in one specific way each).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::util::{alive, backscope, cache, process_dir, stdout_ok};

/// The machine has two cores; tests that run real llama-servers take turns.
pub fn heavy() -> Turn {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    Turn { _guard: guard, since: Instant::now() }
}

/// A heavy test's turn, held until the test ends. With `BACKSCOPE_TEST_TURNS=FILE` each turn appends its length and
/// the test's name to FILE: libtest's `--report-time` counts a test's wait for its turn too, so only this says what
/// each heavy test costs the suite, whose heavy tests run one after another.
pub struct Turn {
    _guard: MutexGuard<'static, ()>,
    since: Instant,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let Some(path) = std::env::var_os("BACKSCOPE_TEST_TURNS") else { return };
        let name = std::thread::current().name().unwrap_or("?").to_string();
        let line = format!("{:.3}\t{name}\n", self.since.elapsed().as_secs_f64());
        // One write of one short line to a file opened for appending: lines of tests ending together do not interleave.
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// The bin directory of the llama.cpp 11434 Vulkan build (CPU backend included): `$BACKSCOPE_LLAMA_BIN`, else the
/// cache that `scripts/llama-build.sh vulkan` fills.
pub fn llama_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("BACKSCOPE_LLAMA_BIN") {
        return PathBuf::from(p);
    }
    let dir = cache().join("llama.cpp").join(backscope::host::cache::LLAMA_VULKAN_BUILD);
    assert!(
        dir.join(".complete").exists() && dir.join("bin/llama-server").exists(),
        "no llama.cpp build at {}: run scripts/llama-build.sh vulkan (about 11 minutes on 2 cores)",
        dir.display()
    );
    dir.join("bin")
}

/// A copy of the build's `libggml-vulkan.so` in `dir` whose integer-dot (`…_q8_1…`) and cooperative-matrix (`…_cm1`,
/// `…_cm2`) shader arrays are renamed, byte for byte, so that their names no longer say what they are: a build
/// without them as far as the shader names go (the code bytes are this build's), standing for a build whose glslc
/// lacked those extensions (Debian 12's, which the H100 evidence ran).
pub fn library_without_the_shaders(dir: &Path) -> PathBuf {
    let mut bytes = std::fs::read(llama_bin().join("libggml-vulkan.so")).unwrap();
    let mut renamed = 0;
    for (from, to) in
        [(&b"_cm1_data\0"[..], &b"_cX1_data\0"[..]), (b"_cm2_data\0", b"_cX2_data\0"), (b"_q8_1", b"_q8_X")]
    {
        let mut at = 0;
        while let Some(i) = bytes[at..].windows(from.len()).position(|w| w == from) {
            bytes[at + i..at + i + to.len()].copy_from_slice(to);
            renamed += 1;
            at += i + from.len();
        }
    }
    assert!(renamed > 100, "only {renamed} names renamed");
    let path = dir.join("libggml-vulkan.so");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The tiny synthesized model (F16), made once per test process by `backscope synth`, or the GGUF named by
/// `$BACKSCOPE_TINY_GGUF` (to reuse one across runs).
pub fn tiny_model() -> PathBuf {
    if let Some(p) = std::env::var_os("BACKSCOPE_TINY_GGUF") {
        return PathBuf::from(p);
    }
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = process_dir("backscope-sweep-tests-").join("tiny.gguf");
            let out =
                backscope().args(["synth", "--preset", "tiny", "-o"]).arg(&path).output().expect("run backscope synth");
            assert!(
                out.status.success() && path.exists(),
                "backscope synth --preset tiny failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            path
        })
        .clone()
}

/// The tiny model quantized to Q4_K_M by the real llama-quantize (as scripts/demo.sh makes it), once per test
/// process, beside [`tiny_model`].
pub fn tiny_q4_k_m() -> PathBuf {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = tiny_model().with_file_name("tiny-q4_k_m.gguf");
            let mut cmd = backscope();
            cmd.args(["synth", "--preset", "tiny", "--type", "q4_k_m", "--llama-bin"])
                .arg(llama_bin())
                .arg("-o")
                .arg(&path);
            stdout_ok(&mut cmd);
            path
        })
        .clone()
}

/// A child process killed when the guard drops, also when the test panics first.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `backscope sweep --json …` whose events arrive on a channel.
pub struct Sweep {
    pub child: Child,
    events: mpsc::Receiver<Value>,
    pub seen: Vec<Value>,
    stderr: std::thread::JoinHandle<String>,
}

impl Sweep {
    pub fn start(args: &[&str], db: &Path, runs: &Path) -> Sweep {
        let mut cmd = backscope();
        cmd.arg("sweep").arg("--json").arg("--db").arg(db).arg("--runs-dir").arg(runs).args(args);
        Sweep::spawn(cmd)
    }

    /// Start `cmd` (a `backscope sweep --json …` with its environment set) and read its events.
    pub fn spawn(mut cmd: std::process::Command) -> Sweep {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start backscope sweep");
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("--json printed a non-JSON line ({e}): {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Sweep { child, events: rx, seen: Vec::new(), stderr }
    }

    /// The next event satisfying `pred`, within `limit`.
    pub fn wait_for(&mut self, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if pred(&v) {
                        return v;
                    }
                }
                Err(_) => panic!("no matching event within {limit:?}; events so far: {:#?}", self.seen),
            }
        }
    }

    /// Wait for the process to end (bounded) and collect the rest of the events and stderr.
    pub fn finish(mut self, limit: Duration) -> (ExitStatus, Vec<Value>, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("backscope sweep did not finish within {limit:?}; events: {:#?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(v) = self.events.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(v);
        }
        let err = self.stderr.join().unwrap_or_default();
        (status, self.seen, err)
    }
}

pub fn event_is(v: &Value, name: &str) -> bool {
    v["event"] == name
}

/// Records of the finished cells, from the event stream.
pub fn records(events: &[Value]) -> Vec<Value> {
    events.iter().filter(|e| event_is(e, "cell_finished")).map(|e| e["record"].clone()).collect()
}

/// `backscope sweep export --jsonl --db DB [--run RUN]`, parsed.
pub fn export(db: &Path, run: Option<&str>) -> Vec<Value> {
    let mut cmd = backscope();
    cmd.args(["sweep", "export", "--jsonl", "--db"]).arg(db);
    if let Some(r) = run {
        cmd.args(["--run", r]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "export failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("export line is JSON"))
        .collect()
}

/// Wait (bounded) until a pid is gone; true if it went.
pub fn gone_within(pid: i64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        // A zombie (exited, not yet reaped) still answers signal 0; its state letter says it is dead.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().map(|r| r.trim().chars().next().unwrap_or('?')));
        if !alive(pid) || state == Some('Z') || state.is_none() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// How a fault injector misbehaves with every connection.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Accept, read the request, close without a byte.
    CloseAfterAccept,
    /// Answer with bytes that are not HTTP.
    Garbage,
    /// HTTP 200 announcing 1 GiB and sending braces until the client gives up.
    HugeBody,
    /// HTTP 200 with a body that is not JSON.
    InvalidJson,
    /// Accept, read the request, then say nothing for a minute.
    Silent,
}

/// A TCP peer on 127.0.0.1 that serves `fault` to at most `max_conns` connections within `life`, then stops.
pub fn injector(fault: Fault, max_conns: usize, life: Duration) -> u16 {
    let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let deadline = Instant::now() + life;
        let mut served = 0;
        while served < max_conns && Instant::now() < deadline {
            match l.accept() {
                Ok((s, _)) => {
                    served += 1;
                    std::thread::spawn(move || serve_fault(s, fault));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    port
}

fn read_request(s: &mut TcpStream) {
    s.set_nonblocking(false).ok();
    s.set_read_timeout(Some(Duration::from_millis(500))).ok();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    for _ in 0..64 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                break;
            }
        }
    }
}

fn serve_fault(mut s: TcpStream, fault: Fault) {
    read_request(&mut s);
    match fault {
        Fault::CloseAfterAccept => {}
        Fault::Garbage => {
            let _ = s.write_all(b"\x00\x01garbage that is not HTTP\r\n\r\n");
        }
        Fault::HugeBody => {
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n");
            let chunk = vec![b'{'; 1 << 20];
            for _ in 0..1024 {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
        }
        Fault::InvalidJson => {
            let body = b"{\"content\": \"unterminated";
            let _ = s.write_all(
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len())
                    .as_bytes(),
            );
            let _ = s.write_all(body);
        }
        Fault::Silent => std::thread::sleep(Duration::from_secs(60)),
    }
}

const STAND_IN: &str = r#"
# Protocol stand-in for `backscope sweep --trace` tests: llama-server's /health and /completion JSON shape; each
# /completion runs the HIP program given as argv[2] and appends its number of launch lines to argv[3].
import http.server, json, subprocess, sys
port, program, counts = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply({"status": "ok"})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        out = subprocess.run([program], capture_output=True, text=True).stdout
        n = sum(1 for l in out.splitlines() if l.startswith("launch "))
        with open(counts, "a") as f:
            f.write(f"{n}\n")
        self.reply({"content": "x" * n, "stop": True, "tokens_predicted": 1, "tokens_evaluated": 1,
                    "timings": {"prompt_n": 1, "prompt_ms": 1.0, "predicted_n": 1, "predicted_ms": 1.0}})
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

/// A traced sweep of the stand-in server (`STAND_IN`) running `program` once per request, `repetitions` cells, into
/// `dir`'s `backscope.db` and `runs/`. Returns the exit status, the events, stderr and the database path; the
/// stand-in appends each request's launch count to `dir/counts.txt`.
pub fn traced_stand_in_sweep(
    dir: &Path,
    program: &Path,
    observer: &Path,
    repetitions: u32,
) -> (std::process::ExitStatus, Vec<Value>, String, PathBuf) {
    let script = dir.join("stand_in.py");
    std::fs::write(&script, STAND_IN).unwrap();
    let counts = dir.join("counts.txt");
    let (db, runs) = (dir.join("backscope.db"), dir.join("runs"));
    let server = format!("hip=command:{},{{port}},{},{}", script.display(), program.display(), counts.display());
    let repetitions = repetitions.to_string();
    let args = [
        "--server",
        &server,
        "--program",
        "hip=python3",
        "--model",
        "stand-in",
        "--repetitions",
        &repetitions,
        "--no-stream",
        "--trace",
        "--observer",
        observer.to_str().unwrap(),
    ];
    let (status, events, stderr) = Sweep::start(&args, &db, &runs).finish(Duration::from_secs(300));
    (status, events, stderr, db)
}
