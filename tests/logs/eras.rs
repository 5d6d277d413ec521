//! `backscope logs` on logs of every era, as a user reads its claims: every cited line quoted as it is written in the
//! file, where the model ran ("served on the CPU because …", the GPUs the runtime dropped), a SIGILL called a
//! CPU-feature mismatch, a retry loop as one crash with its attempts, and an unrecognised log never called "no
//! crash". The logs are lines quoted in public issues (named beside each), as in crates/logs/tests/eras.rs.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::util::*;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/logs/tests/data")
}

/// `backscope logs --format json FILE`: exit code and the JSON.
fn logs_json(path: &Path) -> (Option<i32>, Value) {
    let out = run(backscope().args(["logs", "--format", "json"]).arg(path));
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{}: {e}: {}", path.display(), String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), v)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Every `log_line` source of every claim quotes line N of the file as it is written there (cut at 300 characters
/// with `…`), read here with `str::lines`, independently of the tool's parser.
fn assert_quotes_exact(path: &Path, v: &Value) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let mut checked = 0;
    for c in v["claims"].as_array().unwrap() {
        for s in c["sources"].as_array().into_iter().flatten().filter(|s| s["kind"] == "log_line") {
            let n = s["line"].as_u64().unwrap() as usize;
            let quoted = s["text"].as_str().unwrap();
            if n == 0 || quoted.is_empty() {
                continue;
            }
            let actual = lines
                .get(n - 1)
                .unwrap_or_else(|| panic!("{}: line {n} cited, file has {}", path.display(), lines.len()));
            let actual = actual.trim_end_matches('\r');
            let ok = match quoted.strip_suffix('…') {
                Some(head) => actual.starts_with(head),
                None => quoted == actual,
            };
            assert!(ok, "{}: claim {} cites line {n} as {quoted:?}, the line is {actual:?}", path.display(), c["id"]);
            checked += 1;
        }
    }
    checked
}

#[test]
fn every_cited_line_is_quoted_as_it_is_written() {
    let mut checked = 0;
    let mut files = 0;
    for entry in std::fs::read_dir(fixture_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let (_, v) = logs_json(&path);
        checked += assert_quotes_exact(&path, &v);
        files += 1;
    }
    assert!(files >= 16 && checked >= 60, "{files} files, {checked} quotes checked");
}

/// https://github.com/ollama/ollama/issues/2165: the crash's first line (glibc's abort) is cited with its own text,
/// and the phase rests on the era's load milestone.
#[test]
fn the_dyn_ext_server_crash_cites_its_own_lines() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(
        dir.path(),
        "2165.log",
        "loading library /tmp/ollama800487147/rocm_v5/libext_server.so
2024/01/23 19:26:51 dyn_ext_server.go:90: INFO Loading Dynamic llm server: /tmp/ollama800487147/rocm_v5/libext_server.so
2024/01/23 19:26:51 dyn_ext_server.go:145: INFO Initializing llama server
free(): invalid pointer
Aborted (core dumped)
",
    );
    let (code, v) = logs_json(&log);
    assert_eq!(code, Some(1));
    assert!(assert_quotes_exact(&log, &v) >= 4);
    let phase = claim(&v, "logs.crash.1.phase");
    assert_eq!(phase["confidence"], "Inferred");
    assert!(phase["statement"].as_str().unwrap().contains("model loading"), "{phase}");
    let rocm = claim(&v, "logs.backend.ROCm")["statement"].as_str().unwrap();
    assert!(rocm.contains("rocm_v5/libext_server.so"), "{rocm}");
}

/// https://github.com/intel/ipex-llm/issues/12739: SIGILL with the Go runtime's instruction bytes, which begin with
/// 0xc5 (a VEX prefix: AVX), on a CPU without AVX.
#[test]
fn sigill_with_instruction_bytes_is_a_cpu_feature_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(
        dir.path(),
        "12739.log",
        r#"time=2025-01-23T17:46:10.943+08:00 level=INFO source=runner.go:963 msg="starting go runner"
SIGILL: illegal instruction
PC=0x7f544807fd16 m=4 sigcode=2
signal arrived during cgo execution
instruction bytes: 0xc5 0xf9 0x6e 0xc3 0x8d 0x53 0x3 0xc5 0xf9 0xc4 0xc0 0x1 0xc5 0xf9 0xc4 0xc1
"#,
    );
    let (code, v) = logs_json(&log);
    assert_eq!(code, Some(1));
    let c = claim(&v, "logs.crash.1.cpu_feature");
    assert_eq!(c["confidence"], "Inferred");
    let s = c["statement"].as_str().unwrap();
    assert!(s.contains("CPU-feature mismatch") && s.contains("AVX"), "{s}");
    let cited: Vec<u64> = c["sources"].as_array().unwrap().iter().map(|s| s["line"].as_u64().unwrap()).collect();
    assert_eq!(cited, vec![2, 5]);
    assert!(assert_quotes_exact(&log, &v) > 0);
}

/// The new engine's fit loop (the load request of https://github.com/ollama/ollama/issues/12113, the allocation
/// failures of https://github.com/ollama/ollama/issues/9170, the 36-layer request built in the same format): one
/// crash whose claim lists the attempts with their GPU layers.
#[test]
fn a_fit_loop_is_one_crash_with_its_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(
        dir.path(),
        "fit.log",
        &[
            r#"time=2025-08-29T16:16:55.869+08:00 level=INFO source=runner.go:925 msg=load request="{Operation:fit LoraPath:[] Parallel:1 BatchSize:512 FlashAttention:true KvSize:65536 KvCacheType: NumThreads:40 GPULayers:37[ID:GPU-7b4762f2-9a22-89c9-c605-a570b2e68bd9 Layers:37(0..36)] MultiUserCache:false ProjectorPath: MainGPU:0 UseMmap:false}""#,
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 46963.85 MiB on device 0: cudaMalloc failed: out of memory",
            r#"time=2025-08-29T16:16:56.400+08:00 level=INFO source=runner.go:925 msg=load request="{Operation:fit LoraPath:[] Parallel:1 BatchSize:512 FlashAttention:true KvSize:65536 KvCacheType: NumThreads:40 GPULayers:36[ID:GPU-7b4762f2-9a22-89c9-c605-a570b2e68bd9 Layers:36(1..36)] MultiUserCache:false ProjectorPath: MainGPU:0 UseMmap:false}""#,
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 42640.01 MiB on device 1: cudaMalloc failed: out of memory",
            "",
        ]
        .join("\n"),
    );
    let (code, v) = logs_json(&log);
    assert_eq!(code, Some(1));
    assert_eq!(v["report"]["crashes_total"], 1);
    assert_ne!(v["report"]["flavor"], "llama.cpp");
    let s = claim(&v, "logs.crash.1.attempts")["statement"].as_str().unwrap().to_string();
    assert!(s.contains("2 allocation attempts") && s.contains("37 GPU layers") && s.contains("36 GPU layers"), "{s}");
    assert!(assert_quotes_exact(&log, &v) >= 4);
}

/// Current Ollama's device checks (lines in the format of O discover/amd.go:470 and discover/llama_server.go:299),
/// the offload line (O24 ml/backend/ggml/ggml.go) and the weights on the CPU: "served on the CPU because …".
#[test]
fn served_on_the_cpu_because_the_gpus_were_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(
        dir.path(),
        "dropped.log",
        r#"time=2026-08-01T10:00:00.000Z level=WARN source=amd.go:470 msg="dropping ROCm device — no rocblas support for gfx target" device="AMD Radeon RX 6700 XT" gfx_target=gfx1031 supported="map[gfx1030:true gfx1100:true]" hint="set HSA_OVERRIDE_GFX_VERSION to map to a supported target"
time=2026-08-01T10:00:05.000Z level=INFO source=ggml.go:494 msg="offloaded 0/25 layers to GPU"
time=2026-08-01T10:00:05.000Z level=INFO source=ggml.go:365 msg="model weights" buffer=CPU size="12.8 GiB"
"#,
    );
    let (code, v) = logs_json(&log);
    assert_eq!(code, Some(0), "no crash");
    let dropped = claim(&v, "logs.gpu_dropped.1")["statement"].as_str().unwrap().to_string();
    assert!(dropped.contains("gfx1031") && dropped.contains("no rocblas support"), "{dropped}");
    let cpu = claim(&v, "logs.served_on_cpu");
    assert_eq!(cpu["confidence"], "Inferred", "the 'because' joins two lines");
    let s = cpu["statement"].as_str().unwrap();
    assert!(s.contains("0/25") && s.contains("because") && s.contains("gfx1031"), "{s}");
    let cited: Vec<u64> = cpu["sources"].as_array().unwrap().iter().map(|s| s["line"].as_u64().unwrap()).collect();
    assert_eq!(cited, vec![2, 3, 1]);
    assert!(assert_quotes_exact(&log, &v) >= 3);
}

/// An offload line that says every layer went to the GPU while every model buffer is the CPU's is said plainly.
/// Lines in the format of L src/llama-model.cpp (`load_tensors: offloaded N/M layers to GPU`, `CPU_Mapped model
/// buffer size = …`).
#[test]
fn an_offload_that_contradicts_the_buffers_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(
        dir.path(),
        "contradiction.log",
        "load_tensors: offloaded 33/33 layers to GPU\nload_tensors:   CPU_Mapped model buffer size =  4437.80 MiB\n",
    );
    let (_, v) = logs_json(&log);
    let s = claim(&v, "logs.contradiction.1")["statement"].as_str().unwrap().to_string();
    assert!(s.contains("33/33") && s.contains("CPU_Mapped"), "{s}");
}

#[test]
fn an_unrecognised_text_log_is_not_a_confirmed_no_crash() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(dir.path(), "notes.txt", "my notes\nthe model was slow today\nnothing else\n");
    let (code, v) = logs_json(&log);
    assert_eq!(code, Some(0), "no crash found is still status 0");
    let ending = claim(&v, "logs.ending");
    assert_eq!(ending["confidence"], "Unresolved", "{ending}");
    assert!(ending["statement"].as_str().unwrap().contains("cannot say"), "{ending}");
}
