//! Milestones of every era, phase rules that hold on fragments, retry loops, signatures and where the model ran,
//! on lines quoted in public issues (each test names its issue). Where a test needs a line the issue does not
//! have, it is built in the format of the source line that prints it (cited beside it) and said so.

use std::path::PathBuf;

use logs::analysis::{Crash, Report};
use logs::{analyze_bytes, Limits, Phase};

fn data(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn report(log: &str) -> Report {
    analyze_bytes(log.as_bytes(), Limits::default()).expect("a text log")
}

fn only_crash(r: &Report) -> &Crash {
    assert_eq!(r.crashes.len(), 1, "crashes: {:#?}", r.crashes);
    &r.crashes[0]
}

/// https://github.com/ollama/ollama/issues/2165 (v0.1.21 pre-release, ROCm v5): the dynamic ext server is
/// loaded from the rocm_v5 directory, initialised, and glibc aborts on a bad free.
const DYN_EXT_SERVER_2165: &str = "loading library /tmp/ollama800487147/rocm_v5/libext_server.so
2024/01/23 19:26:51 dyn_ext_server.go:90: INFO Loading Dynamic llm server: /tmp/ollama800487147/rocm_v5/libext_server.so
2024/01/23 19:26:51 dyn_ext_server.go:145: INFO Initializing llama server
free(): invalid pointer
Aborted (core dumped)
";

#[test]
fn the_dyn_ext_server_era_crash_is_in_load_on_rocm() {
    let r = report(DYN_EXT_SERVER_2165);
    let c = only_crash(&r);
    // The issue: the crash comes while the llama server initialises (before any request).
    assert_eq!((c.line, c.phase), (4, Phase::Load), "{}", c.phase_rule);
    assert_eq!(c.phase_lines, vec![2]);
    assert_eq!(c.causes.iter().map(|x| x.line).collect::<Vec<_>>(), vec![4, 5]);
    assert_eq!(r.flavor, "ollama-go-runner", "an Ollama log of the era before v0.30");
    let rocm: Vec<_> = r.facts.placement.backends.iter().filter(|b| b.backend == "ROCm").collect();
    assert_eq!(rocm.len(), 1, "{:?}", r.facts.placement.backends);
    assert_eq!((rocm[0].line, rocm[0].evidence.as_str()), (2, "/tmp/ollama800487147/rocm_v5/libext_server.so"));
}

/// https://github.com/intel/ipex-llm/issues/12739: an Ollama Go runner on a Celeron J4125 (no AVX) dies with
/// SIGILL right after it starts; gdb in the issue puts it in `ggml_init`.
const SIGILL_12739: &str = r#"time=2025-01-23T17:46:10.943+08:00 level=INFO source=runner.go:963 msg="starting go runner"
time=2025-01-23T17:46:10.943+08:00 level=INFO source=runner.go:964 msg=system info="AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | AVX512 = 0 | AVX512_VBMI = 0 | AVX512_VNNI = 0 | AVX512_BF16 = 0 | FMA = 1 | NEON = 0 | SVE = 0 | ARM_FMA = 0 | F16C = 1 | FP16_VA = 0 | RISCV_VECT = 0 | WASM_SIMD = 0 | BLAS = 1 | SSE3 = 1 | SSSE3 = 1 | VSX = 0 | MATMUL_INT8 = 0 | LLAMAFILE = 1 | cgo(gcc)" threads=4
SIGILL: illegal instruction
PC=0x7f544807fd16 m=4 sigcode=2
signal arrived during cgo execution
instruction bytes: 0xc5 0xf9 0x6e 0xc3 0x8d 0x53 0x3 0xc5 0xf9 0xc4 0xc0 0x1 0xc5 0xf9 0xc4 0xc1
"#;

#[test]
fn sigill_keeps_its_instruction_bytes_and_falls_in_the_runner_start() {
    let r = report(SIGILL_12739);
    assert_eq!(r.flavor, "ollama-go-runner");
    let c = only_crash(&r);
    let s = c.signal.as_ref().unwrap();
    assert_eq!(s.name, "SIGILL");
    let bytes = s.instruction_bytes.as_ref().unwrap();
    assert_eq!(bytes.line, 6);
    assert!(bytes.value.starts_with("0xc5 0xf9"), "{}", bytes.value);
    // The runner had started (line 1) and no model was ready: the runner's start and load.
    assert_eq!((c.phase, c.phase_lines.as_slice()), (Phase::Load, &[1u64][..]), "{}", c.phase_rule);
}

/// The new engine's fit loop: the load request of https://github.com/ollama/ollama/issues/12113 (37 GPU layers on
/// a V100), the allocation failures in the words of https://github.com/ollama/ollama/issues/9170, and the next
/// request with one layer fewer built in the same format (O24 runner/ollamarunner/runner.go:1297, ml/device.go:85).
fn fit_loop() -> String {
    [
        r#"time=2025-08-29T16:16:55.869+08:00 level=INFO source=runner.go:925 msg=load request="{Operation:fit LoraPath:[] Parallel:1 BatchSize:512 FlashAttention:true KvSize:65536 KvCacheType: NumThreads:40 GPULayers:37[ID:GPU-7b4762f2-9a22-89c9-c605-a570b2e68bd9 Layers:37(0..36)] MultiUserCache:false ProjectorPath: MainGPU:0 UseMmap:false}""#,
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 46963.85 MiB on device 0: cudaMalloc failed: out of memory",
        r#"time=2025-08-29T16:16:56.400+08:00 level=INFO source=runner.go:925 msg=load request="{Operation:fit LoraPath:[] Parallel:1 BatchSize:512 FlashAttention:true KvSize:65536 KvCacheType: NumThreads:40 GPULayers:36[ID:GPU-7b4762f2-9a22-89c9-c605-a570b2e68bd9 Layers:36(1..36)] MultiUserCache:false ProjectorPath: MainGPU:0 UseMmap:false}""#,
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 42640.01 MiB on device 1: cudaMalloc failed: out of memory",
        "llama_model_load: error loading model: unable to allocate CUDA1 buffer",
    ]
    .join("\n")
}

#[test]
fn a_fit_loop_is_one_incident_with_its_attempts_and_an_ollama_log() {
    let r = report(&fit_loop());
    assert_ne!(r.flavor, "llama.cpp", "the load requests are Ollama's");
    let c = only_crash(&r);
    let attempts: Vec<(u64, Option<u32>, Option<u64>)> =
        c.attempts.iter().map(|a| (a.line, a.gpu_layers, a.request_line)).collect();
    assert_eq!(attempts, vec![(2, Some(37), Some(1)), (4, Some(36), Some(3))]);
    assert_eq!(c.phase, Phase::Load, "{}", c.phase_rule);
}

/// https://github.com/ollama/ollama/issues/9352 (tests/data): the runner is ready at 00:25:18.930 after 1.26 s, then a
/// CPU-backend assertion and a SIGSEGV in llama_decode.
fn with_line_after(log: &str, after: usize, line: &str) -> String {
    let mut lines: Vec<&str> = log.lines().collect();
    lines.insert(after, line);
    lines.join("\n") + "\n"
}

#[test]
fn the_clis_load_only_generate_is_no_finished_request() {
    let log = data("ollama-9352-assert-sigsegv.log");
    // `ollama run` sends a GenerateRequest without a prompt when the model starts (O24 cmd/cmd.go:469-517); the
    // server answers it once the runner is up (server/routes.go:429-436). Its Gin line (format of the Gin lines in
    // tests/data/ollama-12106-rocm-decode-sigsegv.log), built here: the same second, 1.3 s ≈ the 1.26 s start.
    let load_only = r#"[GIN] 2025/02/26 - 00:25:18 | 200 |  1.301234567s |       127.0.0.1 | POST     "/api/generate""#;
    let r = report(&with_line_after(&log, 17, load_only));
    let c = only_crash(&r);
    assert_eq!(c.phase, Phase::FirstCompute, "{}", c.phase_rule);
    assert!(c.phase_lines.contains(&18), "the load-only answer is cited: {:?}", c.phase_lines);
    assert!(c.phase_rule.contains("load-only"), "{}", c.phase_rule);
    // The same answer after 25 s of generation is a finished request: the crash is in a later request.
    let real = load_only.replace(" 1.301234567s", " 25.301234567s");
    let r = report(&with_line_after(&log, 17, &real));
    assert_eq!(only_crash(&r).phase, Phase::Decode, "{}", only_crash(&r).phase_rule);
}

#[test]
fn an_answer_logged_after_the_crash_line_does_not_count() {
    let log = data("ollama-9352-assert-sigsegv.log");
    let after = r#"[GIN] 2025/02/26 - 00:25:20 | 200 |  1.801234567s |       127.0.0.1 | POST     "/api/chat""#;
    // Right after the first assertion (line 18), inside the incident.
    let r = report(&with_line_after(&log, 18, after));
    let c = only_crash(&r);
    assert_eq!((c.line, c.phase), (18, Phase::FirstCompute), "{}", c.phase_rule);
    assert_eq!(r.ending.phase, Phase::FirstCompute, "nor for the state the log ends in: {}", r.ending.phase_rule);
}

#[test]
fn a_fragment_that_starts_after_the_load_is_unknown() {
    let log = data("ollama-9352-assert-sigsegv.log");
    let whole = report(&log);
    assert_eq!(only_crash(&whole).phase, Phase::FirstCompute);
    // The paste begins at the assertion (line 18 of the fixture): the runner's start is not in it, so the stack in
    // llama_decode cannot tell a first compute from a later request.
    let fragment: String = log.lines().skip(17).map(|l| format!("{l}\n")).collect();
    let r = report(&fragment);
    let c = only_crash(&r);
    assert_eq!(c.phase, Phase::Unknown, "{}", c.phase_rule);
    assert!(c.phase_rule.contains("begins after the runner loaded"), "{}", c.phase_rule);
    // And one that begins in the middle of the goroutine dump (fixture line 27: the llama_decode frame).
    let deeper: String = log.lines().skip(26).map(|l| format!("{l}\n")).collect();
    for c in &report(&deeper).crashes {
        assert_ne!(c.phase, Phase::FirstCompute, "{}", c.phase_rule);
        assert_ne!(c.phase, Phase::Decode, "{}", c.phase_rule);
    }
}

/// ggml's CUDA/HIP error path (L ggml/src/ggml-cuda/ggml-cuda.cu:105-109, the failing op at :2480): the op line and
/// the error string of https://github.com/ggml-org/llama.cpp/issues/14370 (`ggml_cuda_compute_forward: MUL failed`,
/// `ROCm error: invalid device function`), then the generic abort; and an out-of-memory error in a BLAS call.
#[test]
fn rocm_errors_behind_the_same_abort_get_their_own_signatures() {
    let invalid = "ggml_cuda_compute_forward: MUL failed
ROCm error: invalid device function
  current device: 0, in function ggml_cuda_compute_forward at /build/ggml/src/ggml-cuda/ggml-cuda.cu:2480
  err
/build/ggml/src/ggml-cuda/ggml-cuda.cu:97: ROCm error
";
    let oom = "ROCm error: out of memory
  current device: 0, in function ggml_cuda_op_mul_mat_cublas at /build/ggml/src/ggml-cuda/ggml-cuda.cu:1300
  err
/build/ggml/src/ggml-cuda/ggml-cuda.cu:97: ROCm error
";
    let a = report(invalid);
    let b = report(oom);
    let (ca, cb) = (only_crash(&a), only_crash(&b));
    assert_ne!(ca.signature.id, cb.signature.id, "{} / {}", ca.signature.text, cb.signature.text);
    assert!(
        ca.signature.text.contains("invalid device function") && ca.signature.text.contains("op MUL"),
        "{}",
        ca.signature.text
    );
    assert!(
        cb.signature.text.contains("out of memory") && cb.signature.text.contains("ggml_cuda_op_mul_mat_cublas"),
        "{}",
        cb.signature.text
    );
    assert_eq!(ca.op.as_ref().map(|o| (o.value.as_str(), o.line)), Some(("MUL", 1)));
    // The op line says the crash was in compute; this fragment does not show the load, so the phase is unknown.
    assert_eq!(ca.phase, Phase::Unknown, "{}", ca.phase_rule);
}

/// Current Ollama's own device checks, each line in the format of its source (O discover/amd.go:470,
/// discover/llama_server.go:299), and the new engine's offload line (O24 ml/backend/ggml/ggml.go:490-502) with its
/// weights on the CPU (O24 ml/device.go `model weights` line, as in https://github.com/ollama/ollama/pull/11090).
#[test]
fn dropped_gpus_and_serving_on_the_cpu() {
    let log = r#"time=2026-08-01T10:00:00.000Z level=WARN source=amd.go:470 msg="dropping ROCm device — no rocblas support for gfx target" device="AMD Radeon RX 6700 XT" gfx_target=gfx1031 supported="map[gfx1030:true gfx1100:true]" hint="set HSA_OVERRIDE_GFX_VERSION to map to a supported target"
time=2026-08-01T10:00:00.100Z level=INFO source=llama_server.go:299 msg="skipping CUDA device — compute capability not in compiled architectures" device="NVIDIA GeForce GTX 1060 6GB" cc=610 archs=750,800,860,890 libDirs=[cuda_v13]
time=2026-08-01T10:00:05.000Z level=INFO source=ggml.go:494 msg="offloaded 0/25 layers to GPU"
time=2026-08-01T10:00:05.000Z level=INFO source=ggml.go:365 msg="model weights" buffer=CPU size="12.8 GiB"
"#;
    let r = report(log);
    let p = &r.facts.placement;
    let dropped: Vec<(Option<&str>, u64)> = p.filtered_gpus.iter().map(|g| (g.gpu.as_deref(), g.line)).collect();
    assert_eq!(dropped, vec![(Some("gfx1031"), 1), (Some("610"), 2)]);
    assert_eq!(p.filtered_gpus[1].supported.as_deref(), Some("750,800,860,890"));
    let cpu = p.cpu_served.as_ref().expect("served on the CPU");
    assert_eq!(cpu.shown_by.iter().map(|x| x.line).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(cpu.because.iter().map(|x| x.line).collect::<Vec<_>>(), vec![1, 2]);
    assert!(p.contradictions.is_empty());
}

/// The 2024 llama-server (and Ollama's vendored copy) logs slots in its own text format (`INFO [function] message |
/// key=value …`, O v0.1.32 llm/ext_server/server.cpp:830 and :1640, utils.hpp server_log); a released slot is a
/// finished request, so a later assertion (the assertion line of tests/data/ollama-9352) is in decoding.
#[test]
fn old_llama_server_slot_lines_are_milestones() {
    let started = r#"INFO [   launch_slot_with_task] slot is processing task | tid="140066406268928" timestamp=1716387013 id_slot=0 id_task=0"#;
    let released = r#"INFO [            update_slots] slot released | tid="140066406268928" timestamp=1716387016 id_slot=0 id_task=0 n_ctx=2048 n_past=92 n_system_tokens=0 n_cache_tokens=92 truncated=false"#;
    let assert = "//ml/backend/ggml/ggml/src/ggml-cpu/ggml-cpu.c:8456: GGML_ASSERT(i01 >= 0 && i01 < ne01) failed";
    let r = report(&format!("{started}\n{released}\n{started}\n{assert}\n"));
    let c = only_crash(&r);
    assert_eq!((c.phase, c.phase_lines.as_slice()), (Phase::Decode, &[2u64][..]), "{}", c.phase_rule);
    let r = report(&format!("{started}\n{assert}\n"));
    assert_ne!(only_crash(&r).phase, Phase::Decode, "{}", only_crash(&r).phase_rule);
}

/// Crash lines of other eras and shells.
#[test]
fn crash_lines_of_old_runtimes_and_shells() {
    // https://github.com/ggml-org/llama.cpp/issues/3320 (2023): the old `CUDA error N at file:line: text` form.
    let r = report("CUDA error 98 at /code/llama.cpp/ggml-cuda.cu:6246: invalid device function\n");
    assert_eq!(only_crash(&r).causes[0].kind, "gpu_error");
    assert!(only_crash(&r).causes[0].text.contains("invalid device function"));
    // https://github.com/ollama/ollama/issues/644 (2023): the old runner's exit line.
    let r = report("2023/09/29 09:11:12 llama.go:320: llama runner exited with error: signal: illegal instruction\n");
    assert_eq!(only_crash(&r).causes.len() + only_crash(&r).consequences.len(), 1);
    assert!(r.crashes[0].consequences[0].text.contains("illegal instruction"), "{:?}", r.crashes[0]);
    // glibc's assert() (glibc assert/assert.c: "%s%s%s:%u: %s%sAssertion `%s' failed.") and zsh's report of the
    // SIGABRT that follows; built in those formats.
    let r = report("llama-server: /src/tools/server/server.cpp:100: void f(): Assertion `ok' failed.\nzsh: abort      ./llama-server -m m.gguf\n");
    let c = only_crash(&r);
    assert_eq!(c.causes.iter().map(|x| x.kind).collect::<Vec<_>>(), vec!["ggml_assert", "process_crash"]);
    assert!(c.causes[0].text.contains("ok"), "{}", c.causes[0].text);
    // The Go runtime on Windows prints the exception code whole (runtime/signal_windows.go: "Exception %#x …").
    let r = report("Exception 0xc0000005 0x1 0x8 0x7ff812340000\n");
    assert_eq!(only_crash(&r).signal.as_ref().unwrap().name, "Exception 0xc0000005");
    // A pinned-memory failure is a warning llama.cpp goes on from (L ggml/src/ggml-cuda/ggml-cuda.cu:1283).
    let r = report("ggml_cuda_host_malloc: failed to allocate 1024.00 MiB of pinned memory: out of memory\n");
    assert!(r.crashes.is_empty(), "{:?}", r.crashes);
}

#[test]
fn a_goroutine_dump_without_its_signal_is_a_crash_of_unknown_phase() {
    // tests/data/ollama-9352 from its goroutine header (line 24): the signal lines are not in the paste.
    let log = data("ollama-9352-assert-sigsegv.log");
    let fragment: String = log.lines().skip(23).map(|l| format!("{l}\n")).collect();
    let r = report(&fragment);
    let c = only_crash(&r);
    assert_eq!((c.line, c.phase), (1, Phase::Unknown), "{}", c.phase_rule);
    assert_eq!(c.goroutine, Some(29));
    assert!(c.signature.frames.iter().any(|f| f.contains("llama_decode")), "{:?}", c.signature);
}

#[test]
fn load_failures_vocab_only_loads_and_k_shifts_place_the_phase() {
    // Ollama's scheduler (O server/sched.go:641, `slog.Info("Load failed", "model", …, "error", err)`): the load failed.
    let r = report(
        r#"time=2026-07-21T14:50:00.000+08:00 level=INFO source=sched.go:641 msg="Load failed" model=/m/blobs/sha256-x error="llama-server process has terminated: signal: aborted"
"#,
    );
    let c = only_crash(&r);
    assert_eq!((c.phase, c.phase_lines.as_slice()), (Phase::Load, &[1u64][..]), "{}", c.phase_rule);
    // A tokenizer-only load (L src/llama.cpp:365) is not the runner's load: a compute crash after it stays unknown.
    let log = data("ollama-9352-assert-sigsegv.log");
    let vocab = "llama_model_loader: loaded meta data with 26 key-value pairs and 291 tensors from /m/blobs/sha256-x (version GGUF V3 (latest))\nllama_model_load: vocab only - skipping tensors\n";
    let fragment: String = log.lines().skip(17).map(|l| format!("{l}\n")).collect();
    let r = report(&format!("{vocab}{fragment}"));
    assert_eq!(only_crash(&r).phase, Phase::Unknown, "{}", only_crash(&r).phase_rule);
    // ggml aborts when the KV cache must shift (L src/llama-kv-cache.cpp:877): the context filled while generating.
    let r =
        report("/src/llama-kv-cache.cpp:877: The current KV cache / model configuration does not support K-shift\n");
    assert_eq!(only_crash(&r).phase, Phase::Decode, "{}", only_crash(&r).phase_rule);
}

#[test]
fn backends_from_buffers_frames_and_plans() {
    // Buffer device names (L src/llama-model.cpp), a crashing frame's library path, Ollama's memory plan
    // (v0.5.0 llm/memory.go:356-366: `msg="offload to cpu" layers.model=25 layers.offload=0`).
    let log = r#"load_tensors:        CUDA0 model buffer size =  4403.50 MiB
/usr/lib/ollama/cuda_jetpack5/libggml-cuda.so(+0x1e3f4)[0x7f0000001000]
time=2024-11-11T08:26:04.508Z level=INFO source=memory.go:356 msg="offload to cpu" layers.requested=-1 layers.model=25 layers.offload=0 layers.split=""
"#;
    let r = report(log);
    let hows: Vec<(&str, &str)> =
        r.facts.placement.backends.iter().map(|b| (b.backend.as_str(), b.how.as_str())).collect();
    assert_eq!(hows, vec![("CUDA", "buffer"), ("CUDA", "crashing frame's library")]);
    let o = r.facts.offload.as_ref().unwrap();
    assert_eq!((o.offloaded, o.total, o.line), (0, 25, 3));
}

#[test]
fn aborts_seen_only_through_their_backtrace() {
    // https://github.com/lemonade-sdk/llamacpp-rocm/issues/32: gdb's banner after ggml attached it (ggml only does
    // so on its way to abort(), L ggml/src/ggml.c:194-269), then the shell's report.
    let r = report("[Inferior 1 (process 52963) detached]\nAborted (core dumped)\n");
    assert_eq!(only_crash(&r).causes[0].kind, "abort");
    // A glibc backtrace (backtrace_symbols format) whose ggml_abort frame is the only sign of the abort, built here.
    let r = report("/usr/lib/libggml-base.so(+0x1200)[0x7f0000001200]\n/usr/lib/libggml-base.so(ggml_abort+0x1a0)[0x7f0000018a02]\n/usr/bin/llama-server(+0x4321)[0x560000004321]\n");
    let c = only_crash(&r);
    assert_eq!((c.causes[0].kind, c.causes[0].line), ("abort", 2));
    // A pager (`less`) cuts the runner's exit line (format of https://github.com/ollama/ollama/issues/644): the
    // summary says which signal name the cut text begins.
    let r = report("2023/09/29 09:11:12 llama.go:320: llama runner exited with error: signal: illegal instr>\n");
    assert!(r.crashes[0].consequences[0].text.contains("illegal instruction"), "{:?}", r.crashes[0].consequences);
}

#[test]
fn ggml_cuda_lines_take_the_backend_another_line_names() {
    // https://github.com/ggml-org/llama.cpp/issues/14370: the op line of ggml's CUDA code, then the HIP build's error.
    let r = report("ggml_cuda_compute_forward: MUL failed\nROCm error: invalid device function\n");
    let backends: Vec<&str> = r.facts.placement.backends.iter().map(|b| b.backend.as_str()).collect();
    assert_eq!(backends, vec!["ROCm", "ROCm"]);
    // Alone, the op line cannot tell CUDA from ROCm.
    let r = report("ggml_cuda_compute_forward: MUL failed\n");
    assert_eq!(r.facts.placement.backends[0].backend, "CUDA/ROCm");
}

#[test]
fn a_runner_that_died_starting_is_in_load() {
    // The 2023 runner's start failure (v0.1.17 llm/llama.go:459 `log.Printf("error starting llama runner: %v", err)`),
    // built in that format: the runner died before it was ready.
    let r = report("2024/01/05 10:00:00 llama.go:459: error starting llama runner: fork/exec /tmp/ollama1/runner: permission denied\n");
    let c = only_crash(&r);
    assert_eq!((c.phase, c.phase_lines.as_slice()), (Phase::Load, &[1u64][..]), "{}", c.phase_rule);
}
