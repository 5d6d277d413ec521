//! The log forensics on real logs: Ollama lines quoted in public issues and llama-server runs captured
//! here (tests/data/README.md says where each comes from). Expected values are read off the log lines
//! and the issue text, each noted beside its assertion.

mod drain;

use std::path::PathBuf;

use logs::analysis::{Crash, Report};
use logs::{analyze_bytes, Analyzer, Limits, Parser, Phase};

fn data(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn report(name: &str) -> Report {
    analyze_bytes(&data(name), Limits::default()).expect("a text log")
}

fn only_crash(r: &Report) -> &Crash {
    assert_eq!(r.crashes.len(), 1, "crashes: {:#?}", r.crashes);
    &r.crashes[0]
}

/// `(line, kind)` of the timeline.
fn kinds(r: &Report) -> Vec<(u64, &'static str)> {
    r.timeline.iter().map(|e| (e.line, e.kind)).collect()
}

fn entry(r: &Report, line: u64) -> &logs::analysis::TimelineEntry {
    r.timeline.iter().find(|e| e.line == line).unwrap_or_else(|| panic!("no timeline entry for L{line}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn ollama_gfx803_sigsegv_during_load() {
    // ollama/ollama#9807: Radeon RX 580 (gfx803), runner started at 02:36:31.324, tensors loading at
    // 02:36:33.333 (L26), 23/23 layers offloaded, then SIGSEGV with PC=0x7f8d52964434 addr=0x18 during cgo.
    let r = report("ollama-9807-gfx803-load-sigsegv.log");
    assert_eq!(r.flavor, "ollama-go-runner", "`starting llama server` with an `ollama runner` command");
    assert_eq!(
        kinds(&r),
        vec![
            (1, "runner_starting"),
            (3, "milestone"),
            (5, "milestone"),
            (8, "devices_found"),
            (9, "gpu_device"),
            (10, "backend_loaded"),
            (11, "backend_loaded"),
            (31, "milestone"),
            (35, "layers_offloaded"),
            (36, "buffer_size"),
            (37, "buffer_size"),
            (38, "signal"),
            (39, "signal_context"),
            (40, "signal_in_cgo"),
        ]
    );
    assert_eq!(entry(&r, 1).t, Some(0.0));
    // L26 (02:36:33.333, an `other` line) is the last timestamp before the offload lines: 2.009 s.
    let offload = entry(&r, 35);
    assert!(offload.t_inherited && close(offload.t.unwrap(), 2.009), "{offload:?}");
    assert_eq!(entry(&r, 35).summary, "offloaded 23/23 layers to GPU");
    let dev = &r.facts.devices[0];
    assert_eq!(
        (dev.backend.as_str(), dev.name.as_str(), dev.arch.as_deref()),
        ("ROCm", "Radeon RX 580 Series", Some("gfx803"))
    );
    assert_eq!((dev.wave_size, dev.vmm), (Some(64), Some(false)));
    assert_eq!(r.facts.backends[0].name, "ROCm");
    let c = only_crash(&r);
    assert_eq!(c.line, 38);
    assert_eq!(c.phase, Phase::Load, "{}", c.phase_rule);
    assert_eq!(c.phase_lines, vec![1], "the runner start with --model is where loading began");
    let s = c.signal.as_ref().unwrap();
    assert_eq!(
        (s.name.as_str(), s.pc.as_deref(), s.addr.as_deref()),
        ("SIGSEGV", Some("0x7f8d52964434"), Some("0x18"))
    );
    assert!(s.in_foreign_code);
    assert_eq!(c.goroutine, Some(23));
    assert_eq!(c.signature.text, "SIGSEGV", "no frame of goroutine 23 survived in the issue's excerpt");
    assert!(close(c.t.unwrap(), 2.009));
}

#[test]
fn ollama_rocm_sigsegv_after_a_generate_answer() {
    // ollama/ollama#12106: a generate request answers 200 at 10:25:21, six seconds later the runner
    // segfaults (addr=0x28) in llama_decode.
    let r = report("ollama-12106-rocm-decode-sigsegv.log");
    assert_eq!(r.flavor, "ollama");
    assert_eq!(r.clock, Some(logs::time::Clock::Journal));
    let c = only_crash(&r);
    // The fragment begins with that 200: without the runner's ready line it cannot be told from the load-only
    // `/api/generate` that `ollama run` sends when the model starts (O24 cmd/cmd.go:469-517, server/routes.go:429),
    // so whether a computation had finished before the crash is unknown (issue 16: never a wrong Inferred).
    assert_eq!(c.phase, Phase::Unknown, "{}", c.phase_rule);
    assert_eq!(c.phase_lines, vec![1, 8]);
    assert!(close(c.t.unwrap(), 6.0));
    let s = c.signal.as_ref().unwrap();
    assert_eq!(
        (s.pc.as_deref(), s.addr.as_deref(), s.sigcode.as_deref()),
        (Some("0x7fb47d1c4640"), Some("0x28"), Some("1"))
    );
    assert_eq!(c.goroutine, Some(52));
    assert_eq!(c.frames[0].source.as_deref(), Some("/usr/lib/go/src/runtime/cgocall.go:167"));
    assert_eq!(c.signature.frames, vec!["llama._Cfunc_llama_decode"]);
    assert_eq!(c.signature.text, "SIGSEGV | llama._Cfunc_llama_decode");
}

#[test]
fn ollama_assert_then_sigsegv_in_first_compute() {
    // ollama/ollama#9352: the runner starts in 1.26 s (L17), then a CPU-backend GGML_ASSERT and a SIGSEGV
    // in llama_decode called from processBatch; no request had finished.
    let r = report("ollama-9352-assert-sigsegv.log");
    let c = only_crash(&r);
    assert_eq!(c.phase, Phase::FirstCompute, "{}", c.phase_rule);
    assert_eq!(c.phase_lines, vec![17, 27], "runner started, and the llama_decode frame");
    // The same assertion printed twice (two threads) is one cause counted twice.
    assert_eq!(c.causes.iter().map(|x| (x.line, x.count)).collect::<Vec<_>>(), vec![(18, 2)]);
    assert_eq!(
        c.signature.text,
        "SIGSEGV | GGML_ASSERT(i01 >= 0 && i01 < ne01) failed at ggml-cpu.c:8456 | llama._Cfunc_llama_decode > \
         llama.(*Context).Decode.func1 > llama.(*Context).Decode > llamarunner.(*Server).processBatch"
    );
    assert_eq!(r.facts.runner_started_s[0].value, 1.26);
    let graph = r.facts.graph.as_ref().unwrap();
    assert_eq!((graph.nodes, graph.splits), (Some(1030), Some(2)));
    let kv = r.facts.buffers.iter().find(|b| b.device == "CUDA0" && b.kind == logs::event::BufferKind::Kv).unwrap();
    assert_eq!(kv.mib, 10240.0);
}

#[test]
fn identical_crashes_group_and_addresses_do_not_matter() {
    // The same crash twice, the second copy with every hexadecimal number changed (as another run of the
    // same build would print): one signature, two crashes.
    let log = String::from_utf8(data("ollama-9352-assert-sigsegv.log")).unwrap();
    let mut shifted = String::new();
    let mut rest = log.as_str();
    while let Some(at) = rest.find("0x") {
        shifted.push_str(&rest[..at + 2]);
        let digits = rest[at + 2..].bytes().take_while(u8::is_ascii_hexdigit).count();
        shifted.push_str(&"5a".repeat(digits.div_ceil(2))[..digits]);
        rest = &rest[at + 2 + digits..];
    }
    shifted.push_str(rest);
    assert_ne!(shifted, log);
    let runner = "time=2025-02-26T00:30:00.000Z level=INFO source=server.go:405 msg=\"starting llama server\" cmd=\"/usr/bin/ollama runner --model /m --port 1\"\n";
    let both = format!("{log}{runner}{shifted}");
    let r = analyze_bytes(both.as_bytes(), Limits::default()).unwrap();
    assert_eq!(r.crashes.len(), 2);
    assert_eq!(r.signatures.len(), 1);
    assert_eq!(r.signatures[0].count, 2);
    assert_eq!(r.crashes[0].signature.id, r.crashes[1].signature.id);
    assert_ne!(r.crashes[0].signal.as_ref().unwrap().pc, r.crashes[1].signal.as_ref().unwrap().pc);
}

#[test]
fn ollama_load_crashes_from_the_stack() {
    // ollama/ollama#13873 (Radeon 8060S): SIGSEGV inside llama_model_load_from_file; no runner milestones
    // in the excerpt, the stack tells the phase.
    let r = report("ollama-13873-8060s-load-sigsegv.log");
    let c = only_crash(&r);
    assert_eq!(c.phase, Phase::Load);
    assert_eq!(c.phase_lines, vec![11], "the _Cfunc_llama_model_load_from_file frame");
    assert_eq!(
        c.signature.frames,
        vec![
            "llama._Cfunc_llama_model_load_from_file",
            "llama.LoadModelFromFile.func1",
            "llama.LoadModelFromFile",
            "llamarunner.(*Server).loadModel"
        ]
    );
    assert_eq!(r.facts.offload.as_ref().map(|o| (o.offloaded, o.total)), Some((81, 81)));

    // ollama/ollama#9509 (Docker Desktop prefixes): RTX 4080 Laptop, SIGABRT in the same function 97 s after
    // the runner start (08:58:54 → 09:00:31); a glibc backtrace precedes it.
    let r = report("ollama-9509-docker-sigabrt.log");
    let c = only_crash(&r);
    assert_eq!((c.phase, c.line), (Phase::Load, 12), "the incident opens at the first backtrace frame");
    assert_eq!(c.signal.as_ref().map(|s| s.name.as_str()), Some("SIGABRT"));
    assert!(close(c.t.unwrap(), 97.0));
    assert_eq!(c.signature.text, "SIGABRT | llama._Cfunc_llama_model_load_from_file > llama.LoadModelFromFile.func1");
    let native: Vec<&str> = c.frames.iter().filter(|f| f.native).map(|f| f.function.as_str()).collect();
    assert_eq!(native, vec!["ollama!?"; 7]);
    let dev = &r.facts.devices[0];
    assert_eq!((dev.backend.as_str(), dev.compute_capability.as_deref()), ("CUDA", Some("8.9")));
}

#[test]
fn ollama_discovery_failure_and_request_failure() {
    // ollama/ollama#15762: the ROCm discovery runner crashed.
    let r = report("ollama-15762-discovery-failure.log");
    let c = only_crash(&r);
    assert_eq!(c.phase, Phase::Discovery);
    assert_eq!(c.causes[0].text, "GPU discovery failed: runner crashed");

    // ollama/ollama#14983: the runner dies mid-request: post predict EOF, exit status 2, HTTP 500.
    let r = report("ollama-14983-post-predict-eof.log");
    let c = only_crash(&r);
    let then: Vec<(u64, &str)> = c.consequences.iter().map(|x| (x.line, x.kind)).collect();
    assert_eq!(then, vec![(30, "post_predict_error"), (31, "runner_terminated"), (32, "http_request")]);
    assert_eq!(c.consequences[0].text, "post predict failed: Post \"http://127.0.0.1:49576/completion\": EOF");
    assert_eq!(c.signature.text, "post predict failed: Post \"http://…/completion\": EOF");
    assert_eq!(r.facts.http_status.get(&500), Some(&1));
    assert_eq!(entry(&r, 32).t, Some(0.72 - 0.72), "the whole-second Gin stamp keeps the finer slog time");
    // The log starts inside the Go runtime's register dump: a crash whose header is cut, from line 1.
    assert_eq!((c.line, c.header_cut), (1, true), "the register dump opens the crash");
    assert!(c.causes[0].text.starts_with("crash (header cut)"), "{}", c.causes[0].text);
    assert_eq!(r.counts.get("register_dump"), Some(&29));
    assert_eq!(r.other.count, 0);
}

#[test]
fn gpu_library_and_memory_errors() {
    // ollama/ollama#11555: hipBLASLt finds no Tensile library for gfx1201.
    let r = report("ollama-11555-hipblaslt-tensile.log");
    let arches: Vec<_> = r.timeline.iter().map(|e| e.summary.contains("[arch gfx1201]")).collect();
    assert_eq!(arches, vec![true, true, false]);
    // ollama/ollama#3765 and #9782: out of memory in hipMalloc / cudaMalloc.
    let r = report("ollama-3765-rocm-oom.log");
    let kinds: Vec<&str> = only_crash(&r).causes.iter().map(|x| x.kind).collect();
    assert_eq!(kinds, vec!["out_of_memory", "gpu_error_location", "ggml_assert"]);
    let r = report("ollama-9782-cuda-oom.log");
    assert_eq!(only_crash(&r).causes[0].kind, "out_of_memory");
    // ggml-org/llama.cpp#17334: Vulkan device loss on an Iris Xe.
    let r = report("vulkan-17334-device-lost.log");
    let dev = &r.facts.devices[0];
    assert_eq!(
        (dev.backend.as_str(), dev.driver.as_deref(), dev.warp_size),
        ("Vulkan", Some("Intel open-source Mesa driver"), Some(32))
    );
    assert_eq!((dev.uma, dev.int_dot, dev.matrix_cores.as_deref()), (Some(true), Some(true), Some("none")));
    let c = only_crash(&r);
    assert_eq!(c.causes[1].text, "Vulkan device lost: vk::Queue::submit: ErrorDeviceLost");
    // ollama/ollama#10569: inference compute on an RTX 2080 Ti.
    let r = report("ollama-10569-inference-compute.log");
    let ic = &r.facts.inference_compute[0];
    assert_eq!(
        (ic["library"].as_str(), ic["compute"].as_str(), ic["name"].as_str()),
        ("cuda", "7.5", "NVIDIA GeForce RTX 2080 Ti")
    );
    assert_eq!(ic["total"], "11.0 GiB");
    // ollama/ollama#18123: the llama-server era.
    let r = report("ollama-18123-llama-server-era.log");
    assert_eq!(r.flavor, "ollama");
    assert_eq!(entry(&r, 5).kind, "device_used");
}

#[test]
fn llama_server_cpu_run_with_colours() {
    let log = data("llama-server-cpu.log");
    let with_escapes = log.split(|&b| b == b'\n').filter(|l| l.contains(&0x1b)).count() as u64;
    let r = analyze_bytes(&log, Limits::default()).unwrap();
    assert_eq!(r.stats.ansi_lines, with_escapes);
    assert_eq!(r.flavor, "llama.cpp");
    assert_eq!(r.clock, Some(logs::time::Clock::Elapsed));
    assert!(r.crashes.is_empty());
    // L36 `CPU_Mapped model buffer size = 35.76 MiB`, L59 `Flash Attention enabled`, L65 `graph: nodes = 133,
    // splits = 1`, L121-123 the request's timings (6 prompt tokens, 4 generated), L127 the shutdown.
    assert_eq!(entry(&r, 36).summary, "CPU_Mapped model buffer 35.76 MiB");
    assert_eq!(r.facts.flash_attention.as_ref().map(|f| (f.value.as_str(), f.line)), Some(("enabled", 59)));
    let g = r.facts.graph.as_ref().unwrap();
    assert_eq!((g.nodes, g.splits, g.line), (Some(133), Some(1), 65));
    let timings: Vec<(u64, Option<u64>)> = r.facts.timings.iter().map(|t| (t.line, t.tokens)).collect();
    assert_eq!(timings, vec![(121, Some(6)), (122, Some(4)), (123, Some(10))]);
    assert!(close(entry(&r, 121).t.unwrap(), 1.721_761 - 0.002_655), "L121 at 0.01.721.761, L1 at 0.00.002.655");
    assert_eq!(r.ending.orderly_shutdown, Some(127));
    assert_eq!(r.ending.request_in_progress, None);
    assert!(r.facts.devices.iter().any(|d| d.backend == "CPU" && d.name == "AMD EPYC"));
}

#[test]
fn llama_server_vulkan_run_without_prefixes() {
    let r = report("llama-server-vulkan.log");
    assert_eq!(r.clock, None, "--no-log-timestamps");
    let vk = r.facts.devices.iter().find(|d| d.backend == "Vulkan").unwrap();
    assert_eq!((vk.index, vk.name.as_str(), vk.vram_mib), (0, "llvmpipe (LLVM 15.0.6, 256 bits)", Some(2048)));
    assert_eq!(r.facts.offload.as_ref().map(|o| (o.offloaded, o.total)), Some((5, 5)));
    let model: Vec<(&str, f64)> = r
        .facts
        .buffers
        .iter()
        .filter(|b| b.kind == logs::event::BufferKind::Model)
        .map(|b| (b.device.as_str(), b.mib))
        .collect();
    assert_eq!(model, vec![("CPU_Mapped", 15.62), ("Vulkan0", 20.13)]);
    assert_eq!(r.facts.graph.as_ref().and_then(|g| g.splits), Some(2));
    assert_eq!(r.ending.orderly_shutdown, Some(134));
}

#[test]
fn llama_server_killed_by_sigsegv_mid_decode() {
    // Killed right after L128 `n_gen =    100`: the log ends without a word about the signal.
    let log = data("llama-server-vulkan-sigsegv.log");
    let r = analyze_bytes(&log, Limits::default()).unwrap();
    assert!(r.crashes.is_empty(), "nothing in the log itself shows the crash");
    assert_eq!(r.ending.request_in_progress, Some(118), "L118 `processing task`");
    assert_eq!(r.ending.orderly_shutdown, None);
    assert_eq!((r.ending.phase, r.ending.phase_lines.clone()), (Phase::Decode, vec![128]));
    // The supervisor saw exit status 139: with that, the crash is placed at the end of the log.
    let mut analyzer = Analyzer::new(Limits::default());
    let stats = Parser::parse_reader(&log[..], Limits::default(), |e| analyzer.event(e)).unwrap();
    analyzer.process_exit("killed by signal 11 (SIGSEGV)");
    let r = analyzer.finish(stats);
    let c = only_crash(&r);
    assert_eq!((c.line, c.phase), (128, Phase::Decode));
    assert_eq!((c.causes[0].line, c.causes[0].text.as_str()), (0, "process exit: killed by signal 11 (SIGSEGV)"));
    assert!(close(c.t.unwrap(), 34.430_133 - 0.170_029), "{:?}", c.t);
}

#[test]
fn every_fixture_parses_the_same_in_chunks() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "log") {
            drain::logs(&std::fs::read(&path).unwrap());
            n += 1;
        }
    }
    assert!(n >= 16, "fixtures found: {n}");
}

/// A report as JSON without what a line prefix changes by itself: the raw lines, byte offsets and the
/// byte count.
fn without_raw_bytes(r: &Report) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                map.retain(|k, _| !matches!(k.as_str(), "raw" | "offset" | "bytes"));
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(r).unwrap();
    strip(&mut v);
    v
}

/// Every line of `log` behind a Docker Compose prefix (`name  | `), as `docker compose logs` writes it.
fn compose_prefixed(log: &[u8], prefix: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(log.len() * 2);
    for line in log.split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(line);
    }
    out
}

#[test]
fn compose_prefix_of_any_length_changes_nothing() {
    // Compose v2 pads each container name to the longest of the project and writes ` | `: the default name of
    // Open WebUI's bundled Ollama (19 bytes, past the 16 bytes once read), and a 40-byte one.
    let prefixes = ["open-webui-ollama-1  | ", "my-company-open-webui-stack-ollama-gpu-1 | "];
    assert_eq!(prefixes[1].len() - " | ".len(), 40);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let log = std::fs::read(&path).unwrap();
        let plain = analyze_bytes(&log, Limits::default()).unwrap();
        for prefix in prefixes {
            let prefixed = analyze_bytes(&compose_prefixed(&log, prefix), Limits::default()).unwrap();
            assert_eq!(without_raw_bytes(&prefixed), without_raw_bytes(&plain), "{} behind {prefix:?}", path.display());
        }
        n += 1;
    }
    assert!(n >= 16, "fixtures found: {n}");
    // And what the issue reads off ollama/ollama#12106 (journal lines inside the Compose prefix): a SIGSEGV at
    // line 2, six seconds after the generate request answered 200, in llama_decode.
    let log = compose_prefixed(&data("ollama-12106-rocm-decode-sigsegv.log"), prefixes[0]);
    let r = analyze_bytes(&log, Limits::default()).unwrap();
    let c = only_crash(&r);
    // Phase unknown: the 200 may be the CLI's load-only request (see ollama_rocm_sigsegv_after_a_generate_answer).
    assert_eq!(
        (c.line, c.phase, c.signature.text.as_str()),
        (2, Phase::Unknown, "SIGSEGV | llama._Cfunc_llama_decode")
    );
    assert!(close(c.t.unwrap(), 6.0));
}

/// Seconds since midnight of a slog line's `time=…THH:MM:SS.fff…`, read here without the crate's parser.
fn slog_clock(line: &str) -> f64 {
    let at = line.find("time=").expect("a slog line") + "time=".len();
    let clock = &line[at..].split('T').nth(1).unwrap()[..12];
    let (h, m, s) = (&clock[0..2], &clock[3..5], &clock[6..12]);
    h.parse::<f64>().unwrap() * 3600.0 + m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
}

#[test]
fn inherited_times_are_brackets() {
    // ollama/ollama#9807: the SIGSEGV line (L38) has no timestamp; the last earlier one is L32's, and none
    // follows: the crash was written at or after L32's time, counted from L1's (the log's first).
    let text = String::from_utf8(data("ollama-9807-gfx803-load-sigsegv.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines[37].contains("time=") && lines[37].starts_with("SIGSEGV"), "{}", lines[37]);
    assert!(lines[32..].iter().all(|l| !l.contains("time=")));
    let lo = slog_clock(lines[31]) - slog_clock(lines[0]);
    let r = report("ollama-9807-gfx803-load-sigsegv.log");
    let c = only_crash(&r);
    assert!(c.t_inherited);
    let (got_lo, hi) = c.t_bounds.expect("an inherited time has a bracket");
    assert!(close(got_lo, lo) && hi.is_none(), "{:?} vs {lo}", c.t_bounds);
    let offload = entry(&r, 35);
    assert!(offload.t_inherited && offload.t_bounds.is_some_and(|(l, h)| close(l, lo) && h.is_none()), "{offload:?}");
    // A line with its own time has no bracket.
    assert!(!entry(&r, 1).t_inherited && entry(&r, 1).t_bounds.is_none());

    // ollama/ollama#9352 with the line Ollama writes when the runner is gone appended 15.951 s after the start
    // (L17): the assertion (L18) and its SIGSEGV have no timestamp, so they happened between the two.
    let log = String::from_utf8(data("ollama-9352-assert-sigsegv.log")).unwrap();
    let after = "time=2025-02-26T00:25:34.881Z level=ERROR source=sched.go:455 msg=\"error loading llama server\" \
                 error=\"llama runner process has terminated: exit status 2\"";
    let log = format!("{log}{after}\n");
    let lines: Vec<&str> = log.lines().collect();
    let timed: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].starts_with("time=")).collect();
    assert_eq!(timed, vec![16, lines.len() - 1], "L17 and the appended line are the only timestamps");
    let (lo, hi) = (0.0, slog_clock(lines[lines.len() - 1]) - slog_clock(lines[16]));
    assert!(close(hi, 15.951));
    let r = analyze_bytes(log.as_bytes(), Limits::default()).unwrap();
    let c = only_crash(&r);
    assert_eq!(c.line, 18);
    assert!(c.t_inherited && close(c.t.unwrap(), lo));
    let (got_lo, got_hi) = c.t_bounds.unwrap();
    assert!(close(got_lo, lo) && got_hi.is_some_and(|h| close(h, hi)), "{:?}", c.t_bounds);
    for e in r.timeline.iter().filter(|e| (18..lines.len() as u64).contains(&e.line)) {
        assert!(e.t_inherited, "{e:?}");
        assert!(e.t_bounds.is_some_and(|(l, h)| close(l, lo) && h.is_some_and(|h| close(h, hi))), "{e:?}");
    }
    let json = serde_json::to_value(c).unwrap();
    let pair: Vec<f64> = json["t_bounds"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert!(pair.len() == 2 && close(pair[0], lo) && close(pair[1], hi), "serialised as [lo, hi]: {json}");
    assert_eq!(
        logs::render::time_words(c.t, c.t_bounds).as_deref(),
        Some("between +0.000 s and +15.951 s"),
        "never a point"
    );
}

#[test]
fn a_whole_second_stamp_after_an_inherited_time_bounds_it_by_the_end_of_its_second() {
    // A slog line at .500, a SIGSEGV without a timestamp, then a Gin line stamped in whole seconds within the
    // same second: the crash was written before the end of that second, not at .500.
    let log =
        "time=2025-08-28T10:25:21.500Z level=INFO source=server.go:1 msg=\"llama runner started in 1.00 seconds\"\n\
               SIGSEGV: segmentation violation\n\
               [GIN] 2025/08/28 - 10:25:21 | 500 | 1.2s | 127.0.0.1 | POST \"/api/generate\"\n";
    let r = analyze_bytes(log.as_bytes(), Limits::default()).unwrap();
    let c = only_crash(&r);
    assert_eq!(c.line, 2);
    assert!(c.t_bounds.is_some_and(|(l, h)| close(l, 0.0) && h.is_some_and(|h| close(h, 0.5))), "{:?}", c.t_bounds);
}

#[test]
fn brackets_close_in_the_timeline_tail_too() {
    // A timeline of one head entry and four tail entries: ten offload lines without timestamps between two slog
    // lines 2.25 s apart (`other` lines, not in the timeline), then one more after the second. Each inherited
    // entry kept, in the head or the tail, is bracketed by the slog lines around it (the last by none later).
    let slog = |clock: &str| format!("time=2025-03-17T02:36:{clock}Z level=INFO source=server.go:1 msg=\"waiting\"\n");
    let offload = "load_tensors: offloaded 23/23 layers to GPU\n";
    let log = format!("{}{}{}{offload}", slog("31.250"), offload.repeat(10), slog("33.500"));
    let limits = Limits { timeline_head: 1, timeline_tail: 4, ..Limits::default() };
    let r = analyze_bytes(log.as_bytes(), limits).unwrap();
    let got: Vec<(u64, Option<logs::analysis::TimeBounds>)> = r.timeline.iter().map(|e| (e.line, e.t_bounds)).collect();
    let between = Some((0.0, Some(2.25)));
    assert_eq!(got, vec![(2, between), (9, between), (10, between), (11, between), (13, Some((2.25, None)))]);
}
