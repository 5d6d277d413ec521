//! Logs of the front ends and wrappers people paste besides Ollama's and llama.cpp's own: KoboldCpp's console, LM
//! Studio's logs, JSON log records, compute-sanitizer reports, Ollama's scheduler records. Each test quotes the lines of
//! a public issue (cited beside it); the expected values are read off those lines. A line built for a test is in the
//! format of a quoted one and says so.

use logs::analysis::Report;
use logs::Phase;

mod pasted;
use pasted::{cause_kinds, only_crash, report};

fn backends(r: &Report) -> Vec<&str> {
    let mut b: Vec<&str> = r.facts.placement.backends.iter().map(|b| b.backend.as_str()).collect();
    b.sort_unstable();
    b.dedup();
    b
}

#[test]
fn koboldcpp_progress_an_error_continues_places_the_crash_in_the_prompt() {
    // LostRuins/koboldcpp#2005: KoboldCpp prints its progress with `\r` and no newline, so the CUDA error that stopped
    // the prompt at 512 of 1049 tokens is written on the progress line.
    let r =
        report("Processing Prompt [BATCH] (512 / 1049 tokens)CUDA error: an illegal memory access was encountered\n");
    let c = only_crash(&r);
    assert_eq!(cause_kinds(c), vec!["gpu_error"]);
    assert!(c.causes[0].text.contains("an illegal memory access"), "{}", c.causes[0].text);
    assert_eq!(r.counts.get("progress"), Some(&1), "the progress is read too");
    assert_eq!(c.phase, Phase::FirstCompute, "{}", c.phase_rule);
    assert!(
        c.phase_rule.contains("prompt was being processed") && c.phase_rule.contains("runner-up"),
        "{}",
        c.phase_rule
    );

    // LostRuins/koboldcpp#1337: the same shape quoted inside the reporter's sentence, the abort on the next line.
    let quoted = "The model seems to load correctly, but when processing the prompt, it gets to token 1024 and then fails with: \"Processing Prompt [BLAS] (1024 / 2380 tokens)ggml/src/ggml-vulkan/ggml-vulkan.cpp:4367: GGML_ASSERT(nei0 * nei1 <= 3072) failed\nAborted (core dumped)\"\n";
    let r = report(quoted);
    let c = only_crash(&r);
    assert_eq!(cause_kinds(c), vec!["ggml_assert", "process_crash"]);
    assert_eq!(c.phase, Phase::FirstCompute, "{}", c.phase_rule);
    assert_eq!(backends(&r), vec!["Vulkan"], "the assertion is in ggml-vulkan.cpp");

    // Progress alone (koboldcpp gpttype_adapter.cpp:3045 and :3272) is no crash.
    let r = report("Processing Prompt [BLAS] (823 / 823 tokens)\nGenerating (26 / 512 tokens)\n");
    assert!(r.crashes.is_empty());
    assert_eq!(r.counts.get("progress"), Some(&2));
}

#[test]
fn a_python_traceback_is_the_stack_of_the_native_crash_it_reports() {
    // LostRuins/koboldcpp#1446: ctypes turned an access violation in the native load_model into OSError.
    let log = r#"Traceback (most recent call last):
  File "C:\koboldcpp\koboldcpp.py", line 6069, in <module>
    main(launch_args=parser.parse_args(),default_args=parser.parse_args([]))
  File "C:\koboldcpp\koboldcpp.py", line 5213, in main
    kcpp_main_process(args,global_memory,using_gui_launcher)
  File "C:\koboldcpp\koboldcpp.py", line 5610, in kcpp_main_process
    loadok = load_model(modelname)
  File "C:\koboldcpp\koboldcpp.py", line 1115, in load_model
    ret = handle.load_model(inputs)
OSError: exception: access violation reading 0x000000005CC05C38
"#;
    let r = report(log);
    let c = only_crash(&r);
    let signal = c.signal.as_ref().expect("the exception is the signal");
    assert_eq!(signal.name, "0xc0000005");
    let frames: Vec<&str> = c.frames.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(frames[0], "koboldcpp.py!load_model", "innermost first: {frames:?}");
    assert_eq!(c.phase, Phase::Load, "{}", c.phase_rule);

    // LostRuins/koboldcpp#180: the status as a negative WinError (-1073741795 = 0xc000001d).
    let r = report("OSError: [WinError -1073741795] Windows Error 0xc000001d\n");
    assert_eq!(only_crash(&r).signal.as_ref().unwrap().name, "0xc000001d");
}

#[test]
fn lm_studio_tells_a_death_once_and_its_exit_code_names_the_status() {
    // lmstudio-ai/lmstudio-bug-tracker#1347: the app log repeats the child's death in its error chain.
    let log = r#"[2026-01-01 16:01:39.279] [error] [LMSInternal][Client=LM Studio][Endpoint=sendMessage] Error in RPC handler: Error: Rehydrated error
crashed without additional information. (Exit code: 18446744072635812000)
    at _0x480204.fromSerializedError (C:\Users\top_troon\AppData\Local\Programs\LM Studio\resources\app\.webpack\main\index.js:1200:144725)
- Caused By: Error: The model has crashed without additional information. (Exit code: 18446744072635812000)
    at _0x4dcf2a.onChildExit (C:\Users\top_troon\AppData\Local\Programs\LM Studio\resources\app\.webpack\main\index.js:107:213277)
"#;
    let r = report(log);
    let c = only_crash(&r);
    assert_eq!(c.consequences.len(), 1, "{:#?}", c.consequences);
    let said = &c.consequences[0].text;
    // 2^64 - 2^32 + 0xc0000409 read as a double prints as 18446744072635812000.
    assert!(said.contains("0xc0000409") && said.contains("rounded through a double"), "{said}");
    assert_eq!(r.clock, Some(logs::time::Clock::Civil), "the bracketed date is the line's time");

    // lmstudio-ai/lmstudio-bug-tracker#1074: the engine's `[date time][LEVEL]` lines and its `llama.cpp abort:N:`.
    let log = "BeginProcessingPrompt
[2025-10-09 11:58:17][DEBUG] PromptProcessing: 17.4824
[2025-10-09 11:58:17][DEBUG] llama.cpp abort:1852: GGML_ASSERT((char *)addr + ggml_backend_buffer_get_alloc_size(buffer, tensor) <= (char *)ggml_backend_buffer_get_base(buffer) + ggml_backend_buffer_get_size(buffer)) failed
";
    let r = report(log);
    let c = only_crash(&r);
    assert_eq!(cause_kinds(c), vec!["ggml_assert"]);
    assert_eq!(c.phase, Phase::FirstCompute, "{}", c.phase_rule);
}

#[test]
fn json_log_records_are_read_as_the_messages_they_carry() {
    // ggml-org/llama.cpp#7637: llama-server's JSON log format (Windows build 3029).
    let log = r#"{"tid":"14964","timestamp":1717067190,"level":"INFO","function":"init","line":727,"msg":"new slot","id_slot":0,"n_ctx_slot":1536}
{"tid":"14964","timestamp":1717067190,"level":"INFO","function":"main","line":3040,"msg":"model loaded"}
{"tid":"14964","timestamp":1717067190,"level":"INFO","function":"main","line":3793,"msg":"HTTP server listening","port":"8080","n_threads_http":"7","hostname":"127.0.0.1"}
"#;
    let r = report(log);
    assert!(r.crashes.is_empty());
    assert_eq!(r.counts.get("server_ready"), Some(&1), "{:?}", r.counts);
    assert_eq!(r.counts.get("milestone"), Some(&1), "HTTP server listening");
    // A record in the same format with the message llama-server's load_model logs when it fails (ollama/ollama
    // v0.1.45 llm/ext_server/server.cpp `LOG_ERROR("unable to load model", …)`): a load error.
    let failed = r#"{"tid":"14964","timestamp":1717067191,"level":"ERR","function":"load_model","line":647,"msg":"unable to load model","model":"C:\\models\\m.gguf"}"#;
    let r = report(&format!("{log}{failed}\n"));
    let c = only_crash(&r);
    assert_eq!((c.line, cause_kinds(c)), (4, vec!["load_error"]));

    // ollama/ollama#11418: Msty wraps each line of Ollama's in a pino record; the wrapped line is Ollama's own.
    let wrapped = r#"{"level":50,"time":1752516972565,"pid":10104,"hostname":"Ryzen7","msg":"time=2025-07-14T19:16:12.565+01:00 level=ERROR source=server.go:449 msg=\"llama runner terminated\" error=\"exit status 0xc0000409\"\n"}
{"level":50,"time":1752516972751,"pid":10104,"hostname":"Ryzen7","msg":"time=2025-07-14T19:16:12.750+01:00 level=ERROR source=sched.go:457 msg=\"error loading llama server\" error=\"llama runner process has terminated: GGML_ASSERT(tensor->op == GGML_OP_UNARY) failed\"\n"}
"#;
    let r = report(wrapped);
    let c = only_crash(&r);
    assert_eq!(c.consequences[0].kind, "runner_terminated");
    assert_eq!(c.phase, Phase::Load, "{}", c.phase_rule);
    assert!(r.timeline.iter().all(|t| t.t.is_some()), "the wrapped slog times are read");
}

#[test]
fn an_allocation_failure_the_runtime_retried_is_no_crash() {
    // ggml-org/llama.cpp pull request 26297 (comment by Aidan24): the compute buffer did not fit, llama.cpp retried
    // without pipeline parallelism (L src/llama-context.cpp:680) and the load went on.
    let log = "1.06.520.077 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 51748.72 MiB on device 1: cudaMalloc failed: out of memory
1.06.520.084 E ggml_gallocr_reserve_n_impl: failed to allocate CUDA1 buffer of size 54262464512
1.06.520.086 E graph_reserve: failed to allocate compute buffers
1.06.520.107 W sched_reserve: compute buffer allocation failed, retrying without pipeline parallelism
1.07.304.130 I srv    load_model: initializing, n_slots = 1, n_ctx_slot = 50176, kv_unified = 'false'
";
    let r = report(log);
    assert!(r.crashes.is_empty(), "{:#?}", r.crashes);
    let h = &r.facts.handled;
    assert_eq!(h.len(), 1);
    assert_eq!((h[0].line, h[0].last_line, h[0].retry_line), (1, 3, 4));
    // The same failure without the retry is a crash in the load.
    let cut: String = log.lines().take(3).map(|l| format!("{l}\n")).collect();
    let r = report(&cut);
    assert!(r.facts.handled.is_empty());
    assert_eq!(only_crash(&r).causes[0].kind, "out_of_memory");
}

#[test]
fn ollamas_scheduler_record_says_how_much_of_the_runner_is_on_the_gpu() {
    // ollama/ollama#10911 (the log quoted in its comment of 2025-06-21): all of the runner in GPU memory.
    let all = r#"time=2025-06-21T21:43:59.168-03:00 level=DEBUG source=sched.go:293 msg="runner with non-zero duration has gone idle, adding timer" runner.name=registry.ollama.ai/library/qwen3:32b_32k runner.inference=cuda runner.devices=2 runner.size="35.7 GiB" runner.vram="35.7 GiB" runner.parallel=2 runner.pid=5990 runner.num_ctx=65536 duration=5m0s"#;
    let r = report(all);
    let m = r.facts.placement.scheduler_memory.as_ref().expect("the scheduler's record");
    assert_eq!((m.size.as_str(), m.vram.as_str(), m.share()), ("35.7 GiB", "35.7 GiB", Some("all")));
    assert_eq!(backends(&r), vec!["CUDA"]);
    assert!(r.facts.placement.cpu_served.is_none());
    // A runner with none of it in GPU memory, in the same format (`runner.vram="0 B"`, as Ollama prints a CPU runner):
    // served on the CPU.
    let none = all
        .replace(r#"runner.inference=cuda"#, "runner.inference=cpu")
        .replace(r#"runner.vram="35.7 GiB""#, r#"runner.vram="0 B""#);
    let r = report(&none);
    assert_eq!(r.facts.placement.scheduler_memory.as_ref().unwrap().share(), Some("none"));
    assert!(backends(&r).is_empty(), "{:?}", r.facts.placement.backends);
    assert!(r.facts.placement.cpu_served.is_some());
    // Current releases print the inference libraries as a list (`runner.inference="[{ID:… Library:Vulkan}]"`).
    let vulkan = all.replace(
        "runner.inference=cuda",
        r#"runner.inference="[{ID:8680a656-0500-0000-0700-000000000000 Library:Vulkan}]""#,
    );
    assert_eq!(backends(&report(&vulkan)), vec!["Vulkan"]);
}

#[test]
fn the_devices_a_runner_enumerated_are_listed() {
    // ollama/ollama#14052 (a French journal): the TRACE line of the devices one runner found.
    let log = r#"févr. 03 22:46:57 al1x-ai ollama[563895]: time=2026-02-03T22:46:57.305+01:00 level=TRACE source=runner.go:467 msg="runner enumerated devices" OLLAMA_LIBRARY_PATH="[/usr/local/lib/ollama /usr/local/lib/ollama/cuda_v13]" devices="[{DeviceID:{ID:GPU-e992e590-348c-6f5a-aaa6-94fd2b0a038c Library:CUDA} Name:CUDA0 Description:NVIDIA GeForce RTX 4070 FilterID: Integrated:false PCIID:0000:01:00.0 TotalMemory:12878610432 FreeMemory:11210129408 ComputeMajor:8 ComputeMinor:9 DriverMajor:13 DriverMinor:0 LibraryPath:[/usr/local/lib/ollama /usr/local/lib/ollama/cuda_v13]}]""#;
    let r = report(log);
    let d: Vec<(&str, u32, &str)> =
        r.facts.devices.iter().map(|d| (d.backend.as_str(), d.index, d.name.as_str())).collect();
    assert_eq!(d, vec![("CUDA", 0, "NVIDIA GeForce RTX 4070")]);
}

#[test]
fn a_compute_sanitizer_report_is_a_gpu_error_with_its_host_frames() {
    // LostRuins/koboldcpp#1469 (comment by jodleif, 2025-04-15).
    let log = "========= Program hit cudaErrorIllegalAddress (error 700) due to \"an illegal memory access was encountered\" on CUDA API call to cudaLaunchKernel.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: ggml_cuda_cpy(ggml_backend_cuda_context&, ggml_tensor const*, ggml_tensor*) in cpy.cu:612 [0x59421a8] in koboldcpp_cublas.so
=========         Host Frame: llama_context::kv_self_update() in llama-context.cpp:765 [0x563b3a1] in koboldcpp_cublas.so
";
    let r = report(log);
    let c = only_crash(&r);
    assert_eq!(cause_kinds(c), vec!["gpu_error"]);
    assert_eq!(c.causes[0].text, "CUDA error: an illegal memory access was encountered");
    let frames: Vec<&str> = c.frames.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(frames, vec!["koboldcpp_cublas.so!ggml_cuda_cpy", "koboldcpp_cublas.so!llama_context::kv_self_update"]);
    assert_eq!(backends(&r), vec!["CUDA"]);
}

#[test]
fn a_hip_call_says_rocm_where_the_error_says_cuda() {
    // ollama/ollama#738 (comment of 2024-03-13): ggml's HIP build named its errors "CUDA" then; the call is hipMalloc,
    // and the device list (its header's first letter lost in the paste) names AMD GPUs.
    let log = "CUDA error: out of memory
  current device: 1, in function ggml_cuda_pool_malloc_leg at /go/src/github.com/jmorganca/ollama/llm/llama.cpp/ggml-cuda.cu:8584
  hipMalloc((void **) &ptr, look_ahead_size)
gml_init_cublas: found 2 ROCm devices:
  Device 0: AMD Radeon RX 6500M, compute capability 10.3, VMM: no
  Device 1: AMD Radeon Graphics, compute capability 10.3, VMM: no
";
    let r = report(log);
    assert_eq!(backends(&r), vec!["ROCm"]);
    assert!(r.facts.devices.iter().all(|d| d.backend == "ROCm"), "{:?}", r.facts.devices);
    let c = only_crash(&r);
    assert!(c.signature.text.contains("in ggml_cuda_pool_malloc_leg"), "{}", c.signature.text);
}

#[test]
fn a_task_numbered_above_zero_means_earlier_requests_ran() {
    // ggml-org/llama.cpp#17060: llama-server numbers tasks from 0 (L tools/server/server-queue.h:17); task 1950 aborted.
    let log = "slot launch_slot_: id  2 | task 1950 | processing task
slot update_slots: id  2 | task 1950 | new prompt, n_ctx_slot = 131072, n_keep = 0, task.n_tokens = 214
libggml-base.so(ggml_abort+0x152)[0x72edb99cda02]
";
    let c = only_crash(&report(log)).clone();
    assert_eq!(c.phase, Phase::Decode, "{}", c.phase_rule);
    assert!(c.phase_rule.contains("task 1950"), "{}", c.phase_rule);
    // Task 0 is the server's first request: its prompt is the first compute.
    let first = log.replace("task 1950", "task 0");
    assert_eq!(only_crash(&report(&first)).phase, Phase::FirstCompute);
}
