//! What a log message says: the rules that turn one message (outer prefixes already removed) into an
//! [`EventKind`].
//!
//! The rules dispatch on the message's shape before they search it: a slog line starts with `time=`, a
//! llama.cpp line with its function name and `: `, a Go trace line has its own forms. Only a message no
//! dispatch claims is searched for the few markers that can appear anywhere (`GGML_ASSERT(`,
//! `ErrorDeviceLost`, `out of memory`…). Every rule is bounded by the message length, which the line cap
//! bounds, and nothing here allocates.
//!
//! Formats and their sources (llama.cpp build 11434 "L", Ollama "O", Ollama v0.24 "O24"):
//! `load_backend: loaded X backend from P` (L `ggml-backend-reg.cpp`); `ggml_cuda_init: found N ROCm
//! devices` and `  Device N: …` (L `ggml-cuda.cu`); `ggml_vulkan: N = NAME (DRIVER) | uma: …` (L
//! `ggml-vulkan.cpp`); `offloaded N/M layers to GPU`, `… model buffer size = X MiB` (L
//! `llama-model.cpp`); `flash_attn = …`, `graph: nodes = …, splits = …` (L `llama-context.cpp`);
//! `slot print_timing: … prompt eval time = …` (L `tools/server/server-context.cpp`); Ollama's slog
//! messages (O `llm/llama_server.go`, `discover/runner.go`; O24 `llm/server.go`); Go runtime crash
//! output (`SIGSEGV: segmentation violation`, `PC=… m=… sigcode=… addr=…`, goroutine dumps).

// The rules by job: `classified` (what a message gives), `text` and `markers` (helpers every rule uses), `trace` (Go and
// native stack traces), `ollama` (slog and Gin), `llama` (llama.cpp lines by shape, which hands them to `devices`,
// `failures`, `server` and `kernel`).
mod classified;
mod devices;
mod failures;
mod kernel;
mod llama;
mod markers;
mod ollama;
mod server;
mod text;
mod trace;

use crate::event::EventKind;

pub use classified::{Classified, Context};
use llama::structured;
use ollama::{gin, slog_line};
use text::{find, leading_u64, trim, trim_start};
use trace::trace_line;

/// Classify one message.
pub fn classify<'a>(msg: &'a [u8], ctx: &mut Context) -> Classified<'a> {
    if let Some(c) = trace_line(msg, ctx) {
        return c;
    }
    if msg.starts_with(b"time=") {
        let mut c = slog_line(msg);
        if matches!(c.kind, EventKind::Other) {
            c.kind = milestone(msg);
        }
        return c;
    }
    if let Some(rest) = msg.strip_prefix(b"[GIN] ") {
        return gin(rest);
    }
    // KoboldCpp's progress begins `Processing Prompt` or `Generating `.
    let progress = match msg.first() {
        Some(b'P' | b'G') => koboldcpp_progress(msg),
        _ => None,
    };
    if let Some((mut progress, mut rest)) = progress {
        // Progress after progress (each without its newline): the last one is where it stopped.
        while let Some((next, tail)) = koboldcpp_progress(rest) {
            (progress, rest) = (next, tail);
        }
        if trim(rest).is_empty() {
            return Classified::plain(progress);
        }
        // The progress line had no newline: what follows it is the next message (an error that stopped it).
        let mut c = classify(rest, ctx);
        c.before = crate::event::Before::of(&progress);
        return c;
    }
    let kind = structured(msg).unwrap_or_else(|| milestone(msg));
    // A crash a person quoted inside a sentence with the progress it interrupted (`… fails with: "Processing Prompt
    // [BLAS] (1024 / 2380 tokens)ggml-vulkan.cpp:4367: GGML_ASSERT(…) failed`): the progress is read too.
    let before = if kind.is_fatal() {
        find(msg, b"Processing Prompt")
            .and_then(|at| koboldcpp_progress(&msg[at..]))
            .and_then(|(p, _)| crate::event::Before::of(&p))
    } else {
        None
    };
    // A goroutine header, or a frame's source line, `created by` line or Markdown-linked frame read outside a dump
    // (a paste that starts inside one): the lines after it are the dump's.
    if matches!(
        kind,
        EventKind::Goroutine { .. }
            | EventKind::GoFrameSource { .. }
            | EventKind::GoCreatedBy { .. }
            | EventKind::GoFrame { .. }
    ) {
        ctx.in_go_trace = true;
    }
    if matches!(kind, EventKind::NativeFrame(_)) {
        ctx.in_native_trace = true;
    }
    Classified { before, ..Classified::plain(kind) }
}

/// KoboldCpp's progress lines (`koboldcpp.py` prints them with `\r` and no newline): `Processing Prompt [BLAS] (512 /
/// 12710 tokens)` (also `[BATCH]`, or no bracket) while a request's prompt is processed, `Generating (20 / 512 tokens)`
/// while it generates. Returns the progress and what follows it on the line.
fn koboldcpp_progress(msg: &[u8]) -> Option<(EventKind<'_>, &[u8])> {
    let (decoding, rest) = match msg.strip_prefix(b"Processing Prompt") {
        Some(rest) => {
            let rest = trim_start(rest);
            let rest = match rest.strip_prefix(b"[") {
                Some(r) => &r[r.iter().position(|&b| b == b']')? + 1..],
                None => rest,
            };
            (false, trim_start(rest))
        }
        None => (true, msg.strip_prefix(b"Generating ")?),
    };
    let (done, rest) = leading_u64(rest.strip_prefix(b"(")?)?;
    let (_, rest) = leading_u64(trim_start(rest.strip_prefix(b" /")?))?;
    let rest = rest.strip_prefix(b" tokens)")?;
    Some((EventKind::Progress { task: None, decoding, tokens: Some(done) }, rest))
}

/// How far into a line a milestone is looked for: every era's milestone text starts within its first few hundred
/// bytes (after a slog `time=… level=… source=… msg=`, a Go log date, a 2024 server's `INFO [function]`), and the
/// long lines no rule claims (configuration dumps, command lines) need not be searched to their end.
const MILESTONE_WINDOW: usize = 384;

/// A line no typed rule claimed: a milestone of the era table, or `Other`.
fn milestone(msg: &[u8]) -> EventKind<'_> {
    match crate::milestones::table().find(&msg[..msg.len().min(MILESTONE_WINDOW)]) {
        Some((index, number)) => EventKind::Milestone { index, number },
        None => EventKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{BufferKind, GpuDriver, GpuDriverEvent};

    fn kind(line: &str) -> EventKind<'_> {
        classify(line.as_bytes(), &mut Context::default()).kind
    }

    /// A whole line as the parser sees it: its outer prefixes (llama.cpp's time and level) stripped first.
    fn kind_of_line(line: &str) -> EventKind<'_> {
        classify(crate::prefix::strip(line.as_bytes()).message, &mut Context::default()).kind
    }

    #[test]
    fn a_port_in_use_is_a_bind_failure() {
        // llama-server 11434 started on a port another process listens on (run on this project's machine; the
        // line is printed at L tools/server/server-http.cpp:517).
        let line =
            "0.00.160.307 E srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 40503";
        assert_eq!(
            kind_of_line(line),
            EventKind::BindFailed { message: b"couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 40503" }
        );
        assert!(!kind_of_line(line).is_fatal(), "the logs command's crash analysis is unchanged");
        assert_eq!(kind_of_line(line).name(), "bind_failed");
        // `ollama serve` while another server holds its port (ollama/ollama issue 707), and the message without
        // llama-server's module and function.
        let go = "Error: listen tcp 127.0.0.1:11434: bind: address already in use";
        assert!(matches!(kind_of_line(go), EventKind::BindFailed { .. }), "{:?}", kind_of_line(go));
        assert!(matches!(kind_of_line("couldn't bind HTTP server socket"), EventKind::BindFailed { .. }));
        // The older form, printed by llama-server's `main`.
        let main = "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080";
        assert!(matches!(kind_of_line(main), EventKind::BindFailed { .. }), "{:?}", kind_of_line(main));
    }

    #[test]
    fn a_skipped_duplicate_device_is_not_a_device_used() {
        // The line llama.cpp 11434 prints for a second device with the same id (L src/llama.cpp:248); the device it
        // names as used had its own `using device` line before.
        let skipped = "llama_model_load_from_file_impl: skipping device Vulkan1 (AMD Radeon RX 7900 XTX (RADV NAVI31)) \
                       with id 0000:03:00.0 - already using device Vulkan0 (AMD Radeon RX 7900 XTX (RADV NAVI31)) with the same id";
        assert!(!matches!(kind_of_line(skipped), EventKind::DeviceUsed { .. }), "{:?}", kind_of_line(skipped));
        let used = "0.00.020.000 I llama_model_load_from_file_impl: using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) (unknown id) - 7927 MiB free";
        assert!(matches!(kind_of_line(used), EventKind::DeviceUsed { device: b"Vulkan0", free_mib: Some(7927), .. }));
    }

    #[test]
    fn devices_from_issue_lines() {
        // ollama/ollama issue 9807.
        let EventKind::GpuDevice(d) = kind("  Device 0: Radeon RX 580 Series, gfx803 (0x803), VMM: no, Wave Size: 64")
        else {
            panic!()
        };
        assert_eq!(
            (d.name, d.arch, d.vmm, d.wave_size),
            (&b"Radeon RX 580 Series"[..], Some(&b"gfx803"[..]), Some(false), Some(64))
        );
        // ollama/ollama issue 8377.
        let EventKind::GpuDevice(d) = kind("  Device 1: NVIDIA GeForce RTX 4060 Ti, compute capability 8.9, VMM: yes")
        else {
            panic!()
        };
        assert_eq!((d.index, d.compute_capability, d.vmm), (1, Some(&b"8.9"[..]), Some(true)));
        // ggml-org/llama.cpp issue 17334.
        let EventKind::VulkanDevice(v) = kind("ggml_vulkan: 0 = Intel(R) Iris(R) Xe Graphics (ADL GT2) (Intel open-source Mesa driver) | uma: 1 | fp16: 1 | bf16: 0 | warp size: 32 | shared memory: 65536 | int dot: 1 | matrix cores: none") else {
            panic!()
        };
        assert_eq!(v.name, b"Intel(R) Iris(R) Xe Graphics (ADL GT2)");
        assert_eq!(v.driver, Some(&b"Intel open-source Mesa driver"[..]));
        assert_eq!((v.uma, v.fp16, v.warp_size, v.int_dot), (Some(true), Some(true), Some(32), Some(true)));
        assert_eq!(v.matrix_cores, Some(&b"none"[..]));
    }

    #[test]
    fn go_crash_lines() {
        // ollama/ollama issue 9352.
        assert_eq!(
            kind("SIGSEGV: segmentation violation"),
            EventKind::Signal { signal: b"SIGSEGV", description: b"segmentation violation" }
        );
        assert_eq!(
            kind("PC=0x7f27a8e24c47 m=0 sigcode=1 addr=0x206a03fb4"),
            EventKind::SignalContext { pc: Some(b"0x7f27a8e24c47"), addr: Some(b"0x206a03fb4"), sigcode: Some(b"1") }
        );
        assert_eq!(
            kind("//ml/backend/ggml/ggml/src/ggml-cpu/ggml-cpu.c:8456: GGML_ASSERT(i01 >= 0 && i01 < ne01) failed"),
            EventKind::GgmlAssert {
                file: b"//ml/backend/ggml/ggml/src/ggml-cpu/ggml-cpu.c",
                line: 8456,
                condition: b"i01 >= 0 && i01 < ne01"
            }
        );
        let mut ctx = Context::default();
        let g = classify(b"goroutine 29 gp=0xc000585dc0 m=0 mp=0x64b1b235c780 [syscall]:", &mut ctx).kind;
        assert_eq!(g, EventKind::Goroutine { id: 29, state: b"syscall" });
        assert!(ctx.in_go_trace);
        let f = classify(
            b"github.com/ollama/ollama/llama.(*Context).Decode.func1(0x64b1b0cd248b?, 0x7f2778ad5c10?)",
            &mut ctx,
        );
        assert_eq!(f.kind, EventKind::GoFrame { function: b"github.com/ollama/ollama/llama.(*Context).Decode.func1" });
        let s = classify(b"        github.com/ollama/ollama/llama/llama.go:163 +0xf5 fp=0xc0000bfc90 sp=0xc0000bfba0 pc=0x64b1b0cb6295", &mut ctx);
        assert_eq!(s.kind, EventKind::GoFrameSource { file: b"github.com/ollama/ollama/llama/llama.go", line: 163 });
        let r = classify(b"rax    0x0", &mut ctx);
        assert_eq!(r.kind, EventKind::GoTraceDetail);
        let out = classify(b"time=2025-02-26T00:25:18.930Z level=INFO source=server.go:596 msg=\"llama runner started in 1.26 seconds\"", &mut ctx);
        assert_eq!(out.kind, EventKind::RunnerStarted { seconds: 1.26 });
        assert!(!ctx.in_go_trace);
    }

    #[test]
    fn slog_and_gin_lines() {
        // ollama/ollama issue 15762.
        let c = classify(br#"time=2026-04-23T01:57:05.334Z level=INFO source=runner.go:464 msg="failure during GPU discovery" OLLAMA_LIBRARY_PATH="[/usr/local/lib/ollama /usr/local/lib/ollama/rocm]" extra_envs="map[GGML_CUDA_INIT:1 ROCR_VISIBLE_DEVICES:0]" error="runner crashed""#, &mut Context::default());
        assert_eq!(c.kind, EventKind::DiscoveryFailure { error: Some(b"runner crashed"), detail: None });
        assert!(c.time.is_some());
        // ollama/ollama issue 14983.
        let c = classify(
            br#"[GIN] 2026/03/20 - 16:36:39 | 500 |  3.428625625s |       127.0.0.1 | POST     "/api/chat""#,
            &mut Context::default(),
        );
        assert_eq!(
            c.kind,
            EventKind::HttpRequest { status: 500, method: b"POST", path: b"/api/chat", latency: Some(b"3.428625625s") }
        );
        let bad = classify(b"time=2026-99-20T16:36:39Z level=INFO msg=x", &mut Context::default());
        assert!(bad.bad_timestamp && bad.time.is_none());
    }

    #[test]
    fn ollama_runner_end_and_unsupported_gpu() {
        // The format Ollama v0.30+ logs when llama-server dies (llm/llama_server.go, quoted in the
        // project's dispatch notes): the error names the signal.
        let c = classify(br#"time=2026-08-29T08:50:00.000Z level=ERROR source=llama_server.go:1023 msg="llama-server terminated" error="signal: segmentation fault" exit=unknown"#, &mut Context::default());
        assert_eq!(c.kind, EventKind::RunnerTerminated { error: b"signal: segmentation fault" });
        // likelovewant/ollama-for-amd issue 40 (Ollama's amd_windows.go in a fork build).
        let c = classify(br#"time=2025-01-23T16:42:09.019+01:00 level=WARN source=amd_windows.go:140 msg="amdgpu is not supported (supported types:[gfx1103])" gpu_type=gfx1150 gpu=0 library=C:\llm\windows-amd64\lib\ollama"#, &mut Context::default());
        let EventKind::UnsupportedGpu { gpu, supported, .. } = c.kind else { panic!("{:?}", c.kind) };
        assert_eq!((gpu, supported), (Some(&b"gfx1150"[..]), Some(&b"[gfx1103]"[..])));
    }

    #[test]
    fn blas_and_gpu_errors() {
        // brknsoul/ROCmLibs issue 4 and ollama/ollama issue 11555.
        let k = kind(
            r"rocBLAS error: Cannot read C:\Program Files\AMD\ROCm\6.1\bin\/rocblas/library/TensileLibrary.dat: No such file or directory for GPU arch : gfx1103",
        );
        let EventKind::BlasError { library, arch, .. } = k else { panic!() };
        assert_eq!((library, arch), (&b"rocBLAS"[..], Some(&b"gfx1103"[..])));
        let k = kind("rocblaslt error: Cannot read /usr/local/lib/ollama/rocm/hipblaslt/library/TensileLibrary_lazy_gfx1201.dat: No such file or directory");
        let EventKind::BlasError { arch, .. } = k else { panic!() };
        assert_eq!(arch, Some(&b"gfx1201"[..]));
        assert_eq!(kind("CUDA error: out of memory"), EventKind::GpuError { api: b"CUDA", message: b"out of memory" });
        assert_eq!(
            kind("  current device: 0, in function ggml_backend_cuda_synchronize at ggml-cuda.cu:2508"),
            EventKind::GpuErrorLocation {
                device: Some(0),
                function: b"ggml_backend_cuda_synchronize",
                file: b"ggml-cuda.cu",
                line: 2508
            }
        );
        assert_eq!(
            kind("  what():  vk::Queue::submit: ErrorDeviceLost"),
            EventKind::DeviceLost { message: b"vk::Queue::submit: ErrorDeviceLost" }
        );
    }

    #[test]
    fn native_frames() {
        // ollama/ollama issue 9509 (glibc backtrace_symbols).
        let EventKind::NativeFrame(f) = kind("/usr/bin/ollama(+0x10e4c9e)[0x563e50bacc9e]") else { panic!() };
        assert_eq!((f.module, f.symbol), (Some(&b"/usr/bin/ollama"[..]), None));
        let EventKind::NativeFrame(f) = kind("/usr/lib/ollama/libggml-base.so(ggml_abort+0x15e)[0x7f30a0e0300b]")
        else {
            panic!()
        };
        assert_eq!(f.symbol, Some(&b"ggml_abort"[..]));
        let EventKind::NativeFrame(f) =
            kind("#3  0x00007ffff7c42476 in __GI_raise (sig=sig@entry=6) at ../sysdeps/posix/raise.c:26")
        else {
            panic!()
        };
        assert_eq!((f.index, f.symbol), (Some(3), Some(&b"__GI_raise"[..])));
    }

    #[test]
    fn llama_lines() {
        assert_eq!(
            kind("load_backend: loaded ROCm backend from /usr/lib/ollama/libggml-hip.so"),
            EventKind::BackendLoaded { backend: b"ROCm", path: b"/usr/lib/ollama/libggml-hip.so" }
        );
        assert_eq!(
            kind("load_tensors: offloaded 23/23 layers to GPU"),
            EventKind::LayersOffloaded { offloaded: 23, total: 23 }
        );
        assert_eq!(
            kind("load_tensors:   CPU_Mapped model buffer size =    35.16 MiB"),
            EventKind::BufferSize { device: b"CPU_Mapped", buffer: BufferKind::Model, mib: 35.16 }
        );
        assert_eq!(
            kind("llama_kv_cache_init:      CUDA0 KV buffer size = 10240.00 MiB"),
            EventKind::BufferSize { device: b"CUDA0", buffer: BufferKind::Kv, mib: 10240.0 }
        );
        assert_eq!(
            kind("llm_load_tensors:      CUDA0 buffer size =  4403.50 MiB"),
            EventKind::BufferSize { device: b"CUDA0", buffer: BufferKind::Model, mib: 4403.5 }
        );
        assert_eq!(
            kind("llama_new_context_with_model: graph splits = 2"),
            EventKind::Graph { nodes: None, splits: Some(2) }
        );
        assert_eq!(kind("llama_new_context_with_model: flash_attn = 0"), EventKind::FlashAttention { setting: b"0" });
        assert_eq!(
            kind("llama.cpp:11968: The current context does not support K-shift"),
            EventKind::Abort {
                file: b"llama.cpp",
                line: 11968,
                message: b"The current context does not support K-shift"
            }
        );
        assert_eq!(kind("print_info: n_vocab          = 32000"), EventKind::Other);
    }

    #[test]
    fn glibc_backtrace_symbols_frames_wherever_they_start() {
        // ggml-org/llama.cpp#21724 (comment by SteelPh0enix, 2026-05-08): ggml_print_backtrace in glibc's
        // backtrace_symbols form, a space before the address; the router's `[pid] ` is stripped as a prefix, a paste may
        // keep other words before the path.
        let lines = [
            ("/nix/store/s2jab8bjlxc1h503ylkjcs8y4b52p1m3-llama-cpp-mpi-vulkan-4.2.0/lib/libggml-base.so.0(ggml_print_backtrace+0x204) [0x752379951c64]",
             "/nix/store/s2jab8bjlxc1h503ylkjcs8y4b52p1m3-llama-cpp-mpi-vulkan-4.2.0/lib/libggml-base.so.0", Some("ggml_print_backtrace")),
            ("/nix/store/si4q3zks5mn5jhzzyri9hhd3cv789vlm-gcc-15.2.0-lib/lib/libstdc++.so.6(_ZSt10unexpectedv+0x0) [0x752378cb286e]",
             "/nix/store/si4q3zks5mn5jhzzyri9hhd3cv789vlm-gcc-15.2.0-lib/lib/libstdc++.so.6", Some("_ZSt10unexpectedv")),
            ("libggml-vulkan.so.0(+0xa12ca) [0x7f0c2a4a12ca]", "libggml-vulkan.so.0", None),
            ("pasted: libggml-base.so.0(ggml_backend_sched_graph_compute_async+0x92c)[0x7f0c2b1e492c]",
             "libggml-base.so.0", Some("ggml_backend_sched_graph_compute_async")),
        ];
        for (line, module, symbol) in lines {
            match kind(line) {
                EventKind::NativeFrame(f) => {
                    assert_eq!(f.module, Some(module.as_bytes()), "{line}");
                    assert_eq!(f.symbol, symbol.map(str::as_bytes), "{line}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
        // A bracket that is no address, a call without a module: not frames.
        assert!(!matches!(kind("see foo(bar) [0xzz]"), EventKind::NativeFrame(_)));
        assert!(!matches!(kind("(sym+0x1) [0x7f00]"), EventKind::NativeFrame(_)));
    }

    #[test]
    fn lldb_frames() {
        // The form lldb's `bt` prints on macOS (a Metal build of llama.cpp aborting through ggml_abort).
        let frame = |line: &str| match kind(line) {
            EventKind::NativeFrame(f) => (f.index, f.module.map(|m| m.to_vec()), f.symbol.map(|s| s.to_vec())),
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(
            frame("  * frame #0: 0x000000018e2a1388 libsystem_kernel.dylib`__pthread_kill + 8"),
            (Some(0), Some(b"libsystem_kernel.dylib".to_vec()), Some(b"__pthread_kill".to_vec()))
        );
        assert_eq!(
            frame("frame #4: 0x0000000100b5c2e0 libggml-base.dylib`ggml_abort + 156"),
            (Some(4), Some(b"libggml-base.dylib".to_vec()), Some(b"ggml_abort".to_vec()))
        );
        assert!(!matches!(kind("frame #x: not a frame"), EventKind::NativeFrame(_)));
    }

    #[test]
    fn go_dump_lines_outside_a_dump() {
        // ollama/ollama#11420 (a journal fragment that starts mid register dump) and ollama/ollama#12137 (one that starts
        // mid goroutine dump, without the signal header).
        assert_eq!(kind("rip    0x7f98b88abe4b"), EventKind::RegisterDump);
        assert_eq!(kind("rflags 0x246"), EventKind::RegisterDump);
        assert_eq!(kind("r15    0x7ffcd56fdc28"), EventKind::RegisterDump);
        assert_eq!(kind("r29    0x16d2e6f90"), EventKind::RegisterDump);
        for prose in ["id 0x1234", "rax is 0x0", "r30    0x1", "rax    0x12 0x34", "rip    0x"] {
            assert!(!matches!(kind(prose), EventKind::RegisterDump), "{prose}");
        }
        let mut ctx = Context::default();
        let source = "        github.com/ollama/ollama/runner/llamarunner/runner.go:880 +0x28 fp=0xc0001247e0 sp=0xc0001247b8 pc=0x55ed7980d108";
        assert!(matches!(classify(source.as_bytes(), &mut ctx).kind, EventKind::GoFrameSource { line: 880, .. }));
        assert!(ctx.in_go_trace, "the lines after it are the dump's");
        assert_eq!(
            classify(b"github.com/ollama/ollama/runner/llamarunner.Execute.gowrap1()", &mut ctx).kind,
            EventKind::GoFrame { function: b"github.com/ollama/ollama/runner/llamarunner.Execute.gowrap1" }
        );
        assert_eq!(
            kind("created by github.com/ollama/ollama/runner/llamarunner.Execute in goroutine 1"),
            EventKind::GoCreatedBy { function: b"github.com/ollama/ollama/runner/llamarunner.Execute" }
        );
        assert!(!matches!(kind("created by the team in goroutine 5"), EventKind::GoCreatedBy { .. }));
        // An indented line without a frame's `+0x` offset is not read as one outside a dump.
        assert!(!matches!(kind("    see runner.go:880 for details"), EventKind::GoFrameSource { .. }));
    }

    #[test]
    fn markdown_linked_go_frames() {
        // The shape GitHub gives a Go frame pasted outside a code block (issue 28's tester: `[github.com/…/ggml._Cfunc_…](https://…)`).
        let frame = "[github.com/ollama/ollama/ml/backend/ggml._Cfunc_ggml_backend_sched_graph_compute_async](https://github.com/ollama/ollama/ml/backend/ggml._Cfunc_ggml_backend_sched_graph_compute_async)(0x7f0c2c000b70, 0xc0004c6000)";
        assert_eq!(
            kind(frame),
            EventKind::GoFrame {
                function: b"github.com/ollama/ollama/ml/backend/ggml._Cfunc_ggml_backend_sched_graph_compute_async"
            }
        );
        let mut ctx = Context { in_go_trace: true, ..Context::default() };
        let source = "\t[github.com/ollama/ollama/ml/backend/ggml/ggml.go:655](https://github.com/ollama/ollama/ml/backend/ggml/ggml.go:655) +0x1a5 fp=0xc";
        assert!(matches!(classify(source.as_bytes(), &mut ctx).kind, EventKind::GoFrameSource { line: 655, .. }));
        assert!(!matches!(kind("[a link](https://example.com)(and text)"), EventKind::GoFrame { .. }));
    }

    #[test]
    fn windows_exceptions_and_prose() {
        // NawfalMotii79/PLFM_RADAR#72: Ollama's Go runtime on Windows.
        assert_eq!(
            kind("Exception 0xc0000005 0x8 0x7ffa191bcb12 0x7ffa191bcb12"),
            EventKind::Signal { signal: b"Exception 0xc0000005", description: b"0x8 0x7ffa191bcb12 0x7ffa191bcb12" }
        );
        // A reporter's sentence in the paste (issue 28's tester) is no runtime line.
        assert_eq!(kind("Exception 0xe06d7363 is a C++ exception thrown by MSVC code."), EventKind::Other);
    }

    #[test]
    fn amdgpu_kernel_lines() {
        fn driver(line: &str) -> GpuDriver<'_> {
            match kind(line) {
                EventKind::GpuDriver(d) => d,
                other => panic!("{line}: {other:?}"),
            }
        }
        // ROCm/legacy-rocm-build#6127 (kernel 6.x form).
        let d = driver("amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::RingTimeout, Some(&b"comp_1.1.0"[..])));
        let d = driver("amdgpu 0000:03:00.0: amdgpu:  Process gst-plugin-scan pid 4087 thread gst-plugin:cs0 pid 4213");
        assert_eq!((d.event, d.process, d.pid), (GpuDriverEvent::Process, Some(&b"gst-plugin-scan"[..]), Some(4087)));
        assert_eq!(
            driver("amdgpu 0000:03:00.0: amdgpu: Ring comp_1.1.0 reset succeeded").event,
            GpuDriverEvent::ResetSucceeded
        );
        let d = driver("amdgpu 0000:03:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:32 vmid:0 pasid:0)");
        assert_eq!((d.event, d.pid), (GpuDriverEvent::PageFault, None));
        assert_eq!(
            driver("amdgpu 0000:03:00.0: amdgpu: [drm] Check your /sys/class/drm/card1/device/devcoredump/data").event,
            GpuDriverEvent::Coredump
        );
        // pop-os/cosmic-comp#2626 (older kernels: the function tag and *ERROR*).
        let d = driver("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=5000163, emitted seq=5000165");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::RingTimeout, Some(&b"gfx_0.0.0"[..])));
        let d = driver("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* Process information: process cosmic-comp pid 3503 thread cosmic-com:cs0 pid 3539");
        assert_eq!((d.process, d.pid), (Some(&b"cosmic-comp"[..]), Some(3503)));
        assert_eq!(driver("amdgpu 0000:08:00.0: amdgpu: GPU reset begin!").event, GpuDriverEvent::ResetBegin);
        assert_eq!(
            driver("amdgpu 0000:08:00.0: amdgpu: GPU reset succeeded, trying to resume").event,
            GpuDriverEvent::ResetSucceeded
        );
        // freebsd/drm-kmod#387: an unnamed process.
        let d = driver("[drm ERROR :amdgpu_job_timedout] Process information: process  pid 540118 thread  pid 540118");
        assert_eq!((d.process, d.pid), (None, Some(540118)));
        // GPUOpen-Drivers/AMDVLK#91: the faulting process in the page-fault line.
        let d = driver("amdgpu 0000:02:00.0: [gfxhub] no-retry page fault (src_id:0 ring:158 vmid:2 pasid:32774, for process vulkan-smoketes pid 28192 thread vulkan-smoketes pid 28192)");
        assert_eq!(
            (d.event, d.process, d.pid),
            (GpuDriverEvent::PageFault, Some(&b"vulkan-smoketes"[..]), Some(28192))
        );
        assert_eq!(
            driver("amdgpu 0000:02:00.0: VM_L2_PROTECTION_FAULT_STATUS:0x0020153C").event,
            GpuDriverEvent::PageFault
        );
        // Other amdgpu lines are not GPU failures.
        assert_eq!(kind("amdgpu 0000:c2:00.0: Dumping IP State"), EventKind::Other);
        // lemonade-sdk/lemonade#2180 and llama.cpp#21724: RADV's word that the kernel reset its context.
        assert!(matches!(
            kind("radv/amdgpu: The CS has been cancelled because the context is lost. This context is innocent."),
            EventKind::DeviceLost { .. }
        ));
    }

    #[test]
    fn nvidia_xid_and_intel_hang_lines() {
        fn driver(line: &str) -> GpuDriver<'_> {
            match kind(line) {
                EventKind::GpuDriver(d) => d,
                other => panic!("{line}: {other:?}"),
            }
        }
        let who =
            |d: GpuDriver<'_>| (d.event, d.code, d.process.map(|p| String::from_utf8_lossy(p).into_owned()), d.pid);
        // tinygrad/tinygrad#6947 (dmesg, driver 535): an MMU fault with the process named.
        let d = driver("NVRM: Xid (PCI:0000:01:00): 31, pid=14292, name=python, Ch 00000030, intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_ESC faulted @ 0x10_00200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ");
        assert_eq!(who(d), (GpuDriverEvent::Xid, Some(31), Some("python".into()), Some(14292)));
        // leptonai/gpud#46: the driver could not tell the process; then a context-switch timeout that names it.
        let d = driver("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter");
        assert_eq!(who(d), (GpuDriverEvent::Xid, Some(13), None, None));
        let d = driver("NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005");
        assert_eq!(who(d), (GpuDriverEvent::Xid, Some(109), Some("pt_main_thread".into()), Some(1797828)));
        // NVIDIA/open-gpu-kernel-modules#1150.
        let d =
            driver("NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149");
        assert_eq!(who(d), (GpuDriverEvent::Xid, Some(45), Some("python3".into()), Some(1818990)));
        // Bumblebee-Project/Bumblebee#677 (an old driver: no process).
        let d = driver("NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000");
        assert_eq!(who(d), (GpuDriverEvent::Xid, Some(31), None, None));
        // Other NVRM lines are not failures.
        assert_eq!(kind("NVRM: GPU at PCI:0000:01:00: GPU-af4f89ae-d08b-1b53-9938-c9ed209a3513"), EventKind::Other);

        // clearlinux/distribution#2907 (i915 with GuC) and freebsd/drm-kmod#509 (the same driver on FreeBSD).
        let d = driver("i915 0000:00:02.0: [drm] GPU HANG: ecode 12:1:0020fffe, in xdg-desktop-por [1676]");
        assert_eq!(who(d), (GpuDriverEvent::Hang, None, Some("xdg-desktop-por".into()), Some(1676)));
        let d = driver("drmn0: [drm] GPU HANG: ecode 9:1:85d7bfff, in MainThread [101714]");
        assert_eq!(who(d), (GpuDriverEvent::Hang, None, Some("MainThread".into()), Some(101714)));
        let d = driver("drmn0: [drm] Resetting rcs0 for preemption time out");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::ResetBegin, Some(&b"rcs0"[..])));
        let d = driver("i915 0000:00:02.0: [drm] Resetting chip for GuC failed to reset engine mask=0x1");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::ResetBegin, None));
        // intel/gvt-linux#137 (before the [drm] tag).
        let d = driver("i915 0000:00:02.0: Resetting rcs0 for hang on rcs0");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::ResetBegin, Some(&b"rcs0"[..])));
        // FreeBSDDesktop/DEPRECATED-freebsd-base-graphics#2 (an old i915: no process).
        let d = driver("[drm] GPU HANG: ecode 7:0:0x87c3ffff, reason: Ring hung, action: reset");
        assert_eq!(who(d), (GpuDriverEvent::Hang, None, None, None));
        // xe: intel/compute-runtime#962 (an engine reset), and the lines drm/xe issue 4856 quotes (Matthew Auld's
        // xe_gpu_scheduler.h fix on stable@vger.kernel.org): a timed-out job no process owns.
        let d = driver("xe 0000:09:00.0: [drm] GT0: Engine reset: engine_class=ccs, logical_mask: 0x1, guc_id=2");
        assert_eq!((d.event, d.ring), (GpuDriverEvent::ResetBegin, Some(&b"ccs"[..])));
        let d = driver("xe 0000:00:02.0: [drm] GT0: Timedout job: seqno=24496, lrc_seqno=24496, guc_id=0, flags=0x13 in no process [-1]");
        assert_eq!(who(d), (GpuDriverEvent::Hang, None, None, None));
        // The process form of the same line (`xe_guc_submit.c`: `… flags=0x%lx in %s [%d]`).
        let d = driver("xe 0000:03:00.0: [drm] Tile0: GT0: Timedout job: seqno=7811, lrc_seqno=7811, guc_id=6, flags=0x20 in llama-server [318738]");
        assert_eq!(who(d), (GpuDriverEvent::Hang, None, Some("llama-server".into()), Some(318738)));
        // Other Intel lines are not failures.
        assert_eq!(kind("i915 0000:00:02.0: [drm] GT0: GUC: SLPC enabled"), EventKind::Other);
        assert_eq!(kind("xe 0000:00:02.0: [drm] fb0: xedrmfb frame buffer device"), EventKind::Other);
    }

    #[test]
    fn a_backend_without_devices_and_named_aborts() {
        // ggml-cuda.cu ggml_cuda_init prints this when cudaGetDeviceCount fails; the runtime goes on without CUDA.
        assert_eq!(
            kind("ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected"),
            EventKind::DevicesFound { backend: b"CUDA", count: 0 }
        );
        // LM Studio's engine log names a ggml_abort's file and line (the shape issue 28 names).
        assert_eq!(
            kind("[2025-05-01 10:00:00][ERROR] llama.cpp abort:97: GGML_ASSERT(n_tokens > 0) failed"),
            EventKind::GgmlAssert { file: b"llama.cpp", line: 97, condition: b"n_tokens > 0" }
        );
        assert!(matches!(kind("x llama.cpp abort:97: out of slots"), EventKind::Abort { line: 97, .. }));
        assert!(!matches!(kind("we abort: 3 times"), EventKind::Abort { .. }));
    }
}
