//! `backscope logs` as a script sees it: the exit status (0 no crash, 1 a crash, 2 unreadable), the time of a crash
//! whose line has no timestamp (a bracket, never a point), and a Docker Compose prefix of a long container name.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

use crate::support::util::*;

/// Exit code, standard output and standard error of `backscope ARGS`.
fn logs(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = run(backscope().arg("logs").args(args));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn claim<'a>(v: &'a Value, id: &str) -> &'a str {
    let c = v["claims"].as_array().unwrap().iter().find(|c| c["id"] == id);
    c.unwrap_or_else(|| panic!("no claim {id}: {v:#}"))["statement"].as_str().unwrap()
}

#[test]
fn logs_exit_status_is_0_without_a_crash_1_with_one_2_when_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    // llama-server-cpu.log (tests/data/README.md): a request completes, SIGTERM, an orderly shutdown — no crash.
    let quiet = log_fixture("llama-server-cpu.log");
    let (code, out, err) = logs(&[quiet.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("no crash"), "{out}");
    // ollama/ollama#9807: a SIGSEGV while the model loads — in every format, and from standard input.
    let crash = log_fixture("ollama-9807-gfx803-load-sigsegv.log");
    for format in ["text", "json", "markdown", "html"] {
        let (code, out, err) = logs(&["--format".as_ref(), format.as_ref(), crash.as_os_str()]);
        assert_eq!(code, Some(1), "{format}: {err}");
        assert!(!out.is_empty(), "{format}: the report is still written");
    }
    let mut child = backscope().args(["logs", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(&std::fs::read(&crash).unwrap()).unwrap();
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(1), "standard input");
    // A reader that stops early (`| head`) does not turn the verdict into 0.
    let mut child = backscope().arg("logs").arg(&crash).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "closed pipe: {}", String::from_utf8_lossy(&out.stderr));
    // Unreadable: a binary file (not a log), a file that does not exist, a directory.
    let binary = dir.path().join("binary.log");
    std::fs::write(&binary, b"SIGSEGV: segmentation violation\n\0\x01\x02").unwrap();
    let missing = dir.path().join("missing.log");
    for (what, path) in [("binary", binary.as_path()), ("missing", &missing), ("directory", dir.path())] {
        let (code, out, err) = logs(&[path.as_os_str()]);
        assert_eq!(code, Some(2), "{what}: {out}{err}");
        assert!(!err.is_empty(), "{what}: says why");
    }
}

#[test]
fn logs_help_documents_the_exit_status() {
    let (code, out, _) = logs(&["--help".as_ref()]);
    assert_eq!(code, Some(0));
    assert!(out.contains("0") && out.contains("no crash") && out.contains("1") && out.contains("2"), "{out}");
    assert!(out.to_lowercase().contains("exit status"), "{out}");
}

#[test]
fn a_crash_line_without_a_timestamp_is_dated_between_its_neighbours() {
    // ollama/ollama#9352: the assertion (line 18) and the SIGSEGV have no timestamp; the runner start (line 17) is
    // the last before them. Appended: the line Ollama writes once the runner is gone, 15.951 s later.
    let dir = tempfile::tempdir().unwrap();
    let after = "time=2025-02-26T00:25:34.881Z level=ERROR source=sched.go:455 msg=\"error loading llama server\" \
                 error=\"llama runner process has terminated: exit status 2\"\n";
    let log = std::fs::read_to_string(log_fixture("ollama-9352-assert-sigsegv.log")).unwrap() + after;
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines[16].starts_with("time=2025-02-26T00:25:18.930Z") && !lines[17].contains("time="));
    // 00:25:34.881 − 00:25:18.930, the first timestamp of the log being line 17's.
    let (lo, hi) = (0.0, 34.881 - 18.930);
    let path = dir.path().join("9352-and-after.log");
    std::fs::write(&path, &log).unwrap();

    let (code, out, err) = logs(&["--json".as_ref(), path.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let statement = claim(&v, "logs.crash.1");
    assert!(
        statement.starts_with("The log shows a crash at line 18 (between +0.000 s and +15.951 s): "),
        "{statement}"
    );
    let crash = &v["report"]["crashes"][0];
    assert_eq!(crash["t_inherited"], true);
    let bounds: Vec<f64> = crash["t_bounds"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert!(bounds.len() == 2 && (bounds[0] - lo).abs() < 1e-6 && (bounds[1] - hi).abs() < 1e-6, "{bounds:?}");
    // Line 17 has its own time: no bracket.
    let entry = v["report"]["timeline"].as_array().unwrap().iter().find(|e| e["line"] == 17).unwrap();
    assert!(entry["t_bounds"].is_null() && entry["t_inherited"] == false, "{entry}");

    // Text: the claim and the crash's heading say the bracket, never the inherited point.
    let (code, text, _) = logs(&[path.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(text.contains("between +0.000 s and +15.951 s"), "{text}");
    assert!(!text.contains("line 18 (+0.000 s)"), "{text}");

    // Without the appended line nothing later is timestamped: at or after.
    let (_, out, _) = logs(&["--json".as_ref(), log_fixture("ollama-9352-assert-sigsegv.log").as_os_str()]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(claim(&v, "logs.crash.1").starts_with("The log shows a crash at line 18 (at or after +0.000 s): "));
    assert_eq!(v["report"]["crashes"][0]["t_bounds"], serde_json::json!([0.0, null]));
}

#[test]
fn a_compose_prefix_of_a_long_container_name_hides_nothing() {
    // ollama/ollama#12106's journal lines as `docker compose logs` shows them for Open WebUI's bundled Ollama: the
    // same crash at line 2, in the same phase, with the same signature as the plain log.
    let dir = tempfile::tempdir().unwrap();
    let plain = log_fixture("ollama-12106-rocm-decode-sigsegv.log");
    let text = std::fs::read_to_string(&plain).unwrap();
    let prefixed: String = text.lines().map(|l| format!("open-webui-ollama-1  | {l}\n")).collect();
    let path = dir.path().join("compose.log");
    std::fs::write(&path, prefixed).unwrap();
    let json = |p: &Path| -> Value {
        let (code, out, err) = logs(&["--json".as_ref(), p.as_os_str()]);
        assert_eq!(code, Some(1), "{}: {err}", p.display());
        serde_json::from_str(&out).unwrap()
    };
    let (a, b) = (json(&plain), json(&path));
    for id in ["logs.crash.1", "logs.crash.1.phase", "logs.crash.1.signature"] {
        assert_eq!(claim(&a, id), claim(&b, id));
    }
    // Unknown: the 200 that opens the fragment may be `ollama run`'s load-only request (never a wrong Inferred phase).
    assert!(claim(&b, "logs.crash.1.phase").contains("during an unknown phase"));
    assert_eq!(b["report"]["flavor"], "ollama");
}

/// The claim `id` with its confidence.
fn claim_with(v: &Value, id: &str) -> (String, String) {
    let c = v["claims"].as_array().unwrap().iter().find(|c| c["id"] == id);
    let c = c.unwrap_or_else(|| panic!("no claim {id}: {v:#}"));
    (c["confidence"].as_str().unwrap().to_string(), c["statement"].as_str().unwrap().to_string())
}

fn logs_json(dir: &Path, name: &str, log: &str) -> (Option<i32>, Value) {
    let path = dir.join(name);
    std::fs::write(&path, log).unwrap();
    let (code, out, err) = logs(&["--json".as_ref(), path.as_os_str()]);
    (code, serde_json::from_str(&out).unwrap_or_else(|e| panic!("{name}: {e}: {out}{err}")))
}

#[test]
fn claims_are_confirmed_only_when_nothing_in_the_log_says_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    // An offload printed in a log whose first line says no CUDA device was found and whose model
    // buffer is on the CPU. The offload is not confirmed, and the claim names both lines.
    let log = "\
ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected
llm_load_tensors: offloaded 29/29 layers to GPU
llm_load_tensors:        CPU buffer size =  4437.80 MiB
";
    let (code, v) = logs_json(dir.path(), "offload.log", log);
    assert_eq!(code, Some(0));
    let (confidence, statement) = claim_with(&v, "logs.offload");
    assert_eq!(confidence, "Inferred", "{statement}");
    assert!(statement.contains("Line 2 says 29/29 layers") && statement.contains("line 1"), "{statement}");
    // A fragment without the runtime's start: its "no crash" covers only its own lines.
    let (confidence, statement) = claim_with(&v, "logs.ending");
    assert_eq!(confidence, "Inferred", "{statement}");
    assert!(statement.contains("fragment"), "{statement}");
    // A reporter's own sentence in the paste is no second crash.
    let log = "\
time=2025-03-08T03:20:41.451+08:00 level=ERROR source=server.go:421 msg=\"llama runner terminated\" error=\"exit status 0xe06d7363\"
Exception 0xe06d7363 is a C++ exception, it seems.
";
    let (code, v) = logs_json(dir.path(), "prose.log", log);
    assert_eq!(code, Some(1));
    assert_eq!(v["report"]["crashes_total"], 1, "{v:#}");
    assert!(claim(&v, "logs.crash.1").contains("0xe06d7363, an MSVC C++ exception"), "{}", claim(&v, "logs.crash.1"));
}

#[test]
fn a_fragment_that_starts_mid_dump_is_a_crash_with_its_header_cut() {
    // ollama/ollama#12137 (turn 1): the paste begins inside the Go runtime's dump; the verdict is a crash (status 1).
    let dir = tempfile::tempdir().unwrap();
    let log = "\
Aug 31 13:49:48 ubuntu-desktop ollama[2824048]:         github.com/ollama/ollama/runner/llamarunner/runner.go:880 +0x28 fp=0xc0001247e0 sp=0xc0001247b8 pc=0x55ed7980d108
Aug 31 13:49:48 ubuntu-desktop ollama[2824048]: created by github.com/ollama/ollama/runner/llamarunner.Execute in goroutine 1
";
    let (code, v) = logs_json(dir.path(), "cut.log", log);
    assert_eq!(code, Some(1));
    assert!(claim(&v, "logs.crash.1").contains("crash (header cut)"), "{}", claim(&v, "logs.crash.1"));
}

#[test]
fn repeats_apart_are_not_called_threads_and_the_kernel_side_is_joined() {
    let dir = tempfile::tempdir().unwrap();
    // The same out-of-memory line twice, with other lines between: two retries or two threads, not said to be threads.
    let log = "\
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc failed: out of memory
llama_model_load: retrying with fewer layers
llm_load_tensors: offloading 20 repeating layers to GPU
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc failed: out of memory
";
    let (_, v) = logs_json(dir.path(), "retry.log", log);
    let crash = claim(&v, "logs.crash.1");
    assert!(crash.contains("printed 2 times (between lines 1 and 4, not one after another"), "{crash}");
    assert!(!crash.contains("threads that hit"), "{crash}");
    // ggml-org/llama.cpp#21724 turn 8 (kernel) and the runner's lost device: one claim joins them.
    let log = "\
maj 08 19:27:35 RX-78-FPC kernel: amdgpu 0000:c2:00.0: ring gfx_0.0.0 timeout, signaled seq=166926, emitted seq=166928
maj 08 19:27:35 RX-78-FPC kernel: amdgpu 0000:c2:00.0:  Process llama-server pid 12519 thread llama-server pid 12519
maj 08 19:27:35 RX-78-FPC kernel: amdgpu 0000:c2:00.0: Ring gfx_0.0.0 reset succeeded
maj 08 19:27:35 RX-78-FPC llama-server[12519]:   what():  vk::Queue::submit: ErrorDeviceLost
";
    let (code, v) = logs_json(dir.path(), "kernel.log", log);
    assert_eq!(code, Some(1));
    let (confidence, statement) = claim_with(&v, "logs.crash.1.gpu_driver");
    assert_eq!(confidence, "Inferred", "the join is an inference from the order of the lines");
    assert!(
        statement.contains("the GPU job of process llama-server pid 12519 timed out on ring gfx_0.0.0 (line 1)")
            && statement.contains("the GPU was reset (line 3)")
            && statement.contains("the runner then crashed with Vulkan device lost"),
        "{statement}"
    );
}
