//! Crash shapes that pasted logs take, each from a public issue (cited beside it), read through the whole analysis:
//! the incident, its phase and signature. The expected values are read off the quoted lines.

use logs::event::GpuDriverEvent;
use logs::Phase;

mod pasted;
use pasted::{cause_kinds, only_crash, report};

#[test]
fn ggml_backtrace_in_backtrace_symbols_form_behind_a_router_prefix_is_a_crash() {
    // ggml-org/llama.cpp#21724, comment by SteelPh0enix (2026-05-08): no signal line, no `terminate called` line;
    // RADV's lost context, then ggml_print_backtrace's frames through libstdc++'s terminate path.
    let log = "\
[7:35:56 PM] maj 08 19:35:55 RX-78-FPC llm-router[15732]: [38593] radv/amdgpu: The CS has been cancelled because the context is lost. This context is innocent.
[7:35:56 PM] maj 08 19:35:55 RX-78-FPC llm-router[15732]: [38593] /nix/store/s2jab8bjlxc1h503ylkjcs8y4b52p1m3-llama-cpp-mpi-vulkan-4.2.0/lib/libggml-base.so.0(+0x1979a) [0x75237995179a]
[7:35:56 PM] maj 08 19:35:55 RX-78-FPC llm-router[15732]: [38593] /nix/store/s2jab8bjlxc1h503ylkjcs8y4b52p1m3-llama-cpp-mpi-vulkan-4.2.0/lib/libggml-base.so.0(ggml_print_backtrace+0x204) [0x752379951c64]
[7:35:56 PM] maj 08 19:35:55 RX-78-FPC llm-router[15732]: [38593] /nix/store/si4q3zks5mn5jhzzyri9hhd3cv789vlm-gcc-15.2.0-lib/lib/libstdc++.so.6(_ZSt10unexpectedv+0x0) [0x752378cb286e]
";
    let r = report(log);
    let c = only_crash(&r);
    assert_eq!(r.counts.get("native_frame"), Some(&3), "every frame line is a frame");
    assert_eq!(cause_kinds(c), vec!["device_lost", "cpp_terminate"]);
    // Frames without a symbol are addresses that differ between builds; the machinery frames are skipped.
    assert_eq!(c.signature.frames, Vec::<String>::new());
    assert!(c.signature.text.starts_with("Vulkan device lost: "), "{}", c.signature.text);
    assert_eq!(c.phase, Phase::Unknown);
}

#[test]
fn a_go_dump_cut_before_its_header_is_a_crash_with_its_header_cut() {
    // ollama/ollama#12137, turn 1 by shockme: a journal fragment from inside a goroutine dump, 8-space indents.
    let log = "\
Aug 31 13:49:48 ubuntu-desktop ollama[2824048]:         github.com/ollama/ollama/runner/llamarunner/runner.go:319 +0x4b fp=0xc0001247b8 sp=0xc0001246e8 pc=0x55ed7980822b
Aug 31 13:49:48 ubuntu-desktop ollama[2824048]: github.com/ollama/ollama/runner/llamarunner.Execute.gowrap1()
Aug 31 13:49:48 ubuntu-desktop ollama[2824048]:         github.com/ollama/ollama/runner/llamarunner/runner.go:880 +0x28 fp=0xc0001247e0 sp=0xc0001247b8 pc=0x55ed7980d108
Aug 31 13:49:48 ubuntu-desktop ollama[2824048]: created by github.com/ollama/ollama/runner/llamarunner.Execute in goroutine 1
Aug 31 13:49:48 ubuntu-desktop ollama[2824048]:         github.com/ollama/ollama/runner/llamarunner/runner.go:880 +0x4c5
Aug 31 13:49:48 ubuntu-desktop ollama[2824048]: goroutine 205 gp=0xc000603dc0 m=nil [IO wait]:
Aug 31 13:49:48 ubuntu-desktop ollama[2824048]: runtime.gopark(0x55ed7941c4c5?, 0xc000128080?, 0x40?, 0x7a?, 0xb?)
";
    let r = report(log);
    let c = only_crash(&r);
    assert_eq!((c.line, c.header_cut), (1, true));
    assert!(c.causes[0].text.starts_with("crash (header cut)"), "{}", c.causes[0].text);
    // Goroutine 205 is not the crashing goroutine: the one that crashed was above the fragment.
    assert_eq!((c.goroutine, c.frames.len()), (None, 0));

    // ollama/ollama#11420, turn 2 by TonyTotal: registers only, then Ollama's words that the load failed.
    let log = "\
Jul 14 12:30:34 tony-desktop ollama[1610]: rip    0x7f98b88abe4b
Jul 14 12:30:34 tony-desktop ollama[1610]: rflags 0x246
Jul 14 12:30:34 tony-desktop ollama[1610]: cs     0x33
Jul 14 12:30:35 tony-desktop ollama[1610]: time=2025-07-14T12:30:35.398-04:00 level=ERROR source=sched.go:489 msg=\"error loading llama server\" error=\"llama runner process has terminated: exit status 2\"
";
    let r = report(log);
    let c = only_crash(&r);
    assert_eq!((c.line, c.header_cut, c.phase), (1, true, Phase::Load));
    // The runner's own words decide the signature, not the cut.
    assert!(!c.signature.text.contains("header cut"), "{}", c.signature.text);
}

#[test]
fn the_kernel_side_of_a_gpu_failure_joins_the_runners_crash() {
    // Kernel lines: ggml-org/llama.cpp#21724, turn 8 by SteelPh0enix. Runner lines: the shape llama-server prints for
    // a lost Vulkan device (ggml-org/llama.cpp#17334). One journal, the kernel first.
    let log = "\
maj 08 19:27:35 RX-78-FPC kernel: amdgpu 0000:c2:00.0: [drm] AMDGPU device coredump file has been created
maj 08 19:27:35 RX-78-FPC kernel: amdgpu 0000:c2:00.0: [drm] Check your /sys/class/drm/card1/device/devcoredump/data
maj 08 19:27:35 RX-78-FPC kernel: amdgpu 0000:c2:00.0: ring gfx_0.0.0 timeout, signaled seq=166926, emitted seq=166928
maj 08 19:27:35 RX-78-FPC kernel: amdgpu 0000:c2:00.0:  Process llama-server pid 12519 thread llama-server pid 12519
maj 08 19:27:35 RX-78-FPC kernel: amdgpu 0000:c2:00.0: Starting gfx_0.0.0 ring reset
maj 08 19:27:35 RX-78-FPC kernel: amdgpu 0000:c2:00.0: Ring gfx_0.0.0 reset succeeded
maj 08 19:27:35 RX-78-FPC llama-server[12519]: terminate called after throwing an instance of 'vk::DeviceLostError'
maj 08 19:27:35 RX-78-FPC llama-server[12519]:   what():  vk::Queue::submit: ErrorDeviceLost
maj 08 19:35:55 RX-78-FPC kernel: amdgpu 0000:c2:00.0: [drm] AMDGPU device coredump file has been created
";
    let r = report(log);
    assert_eq!(r.crashes.len(), 2, "a second hang after the reset is a crash of its own: {:#?}", r.crashes);
    let c = &r.crashes[0];
    let events: Vec<GpuDriverEvent> = c.gpu_driver.iter().map(|d| d.event).collect();
    use GpuDriverEvent::*;
    assert_eq!(events, vec![Coredump, Coredump, RingTimeout, Process, ResetBegin, ResetSucceeded]);
    let who = c.gpu_driver.iter().find(|d| d.pid.is_some()).unwrap();
    assert_eq!((who.process.as_deref(), who.pid), (Some("llama-server"), Some(12519)));
    assert_eq!(c.gpu_driver[2].ring.as_deref(), Some("gfx_0.0.0"));
    // The kernel's timeout leads the kernel lines (the coredump is said once); the runner's lost device joins.
    assert_eq!(cause_kinds(c), vec!["gpu_driver", "gpu_driver", "gpu_driver", "cpp_terminate", "device_lost"]);
    assert!(c.causes[0].text.contains("timed out on ring gfx_0.0.0"), "{}", c.causes[0].text);
    assert!(c.causes.iter().all(|x| x.count == 1), "{:#?}", c.causes);
    // The signature is the runner's failure, not the kernel's words around it.
    assert!(c.signature.text.starts_with("Vulkan device lost"), "{}", c.signature.text);
    assert_eq!((r.crashes[1].line, r.crashes[1].gpu_driver.len()), (9, 1));
}

#[test]
fn nvidia_xids_and_an_intel_hang_pasted_beside_a_runner_join_its_crash() {
    // Kernel lines: tinygrad/tinygrad#6947 (dmesg, an MMU fault naming its process); runner lines: the shape ggml-cuda
    // prints for a CUDA error (ggml-cuda.cu `ggml_cuda_error`). The kernel first, as a journal interleaves them.
    let log = "\
[22859.081855] NVRM: GPU at PCI:0000:01:00: GPU-af4f89ae-d08b-1b53-9938-c9ed209a3513
[22859.081860] NVRM: Xid (PCI:0000:01:00): 31, pid=14292, name=python, Ch 00000030, intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_ESC faulted @ 0x10_00200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ
CUDA error: an illegal memory access was encountered
";
    let r = report(log);
    let c = only_crash(&r);
    let d: Vec<(GpuDriverEvent, Option<u32>, Option<u32>)> =
        c.gpu_driver.iter().map(|d| (d.event, d.code, d.pid)).collect();
    assert_eq!(d, vec![(GpuDriverEvent::Xid, Some(31), Some(14292))]);
    assert_eq!(cause_kinds(c), vec!["gpu_driver", "gpu_error"]);
    assert!(c.causes[0].text.contains("NVIDIA Xid 31 of process python pid 14292"), "{}", c.causes[0].text);

    // clearlinux/distribution#2907: an i915 hang naming its process, after the chip reset (the paste's lines without
    // its `22:39:31 kernel: `, as `journalctl -k -o cat` prints them).
    let log = "\
i915 0000:00:02.0: [drm] Resetting chip for GuC failed to reset engine mask=0x1
i915 0000:00:02.0: [drm] GPU HANG: ecode 12:1:0020fffe, in xdg-desktop-por [1676]
";
    let r = report(log);
    let c = only_crash(&r);
    let d: Vec<(GpuDriverEvent, Option<u32>)> = c.gpu_driver.iter().map(|d| (d.event, d.pid)).collect();
    assert_eq!(d, vec![(GpuDriverEvent::ResetBegin, None), (GpuDriverEvent::Hang, Some(1676))]);
}

#[test]
fn windows_exit_codes_keep_failures_apart() {
    // ollama/ollama#9583 (0xc0000409), #6946 (0xc0000005), #5669 (0xc0000135), #16645 (0xe06d7363): the same line
    // with four codes, four different failures; the same code twice is one.
    let line = |code: &str, t: &str| {
        format!("time=2025-03-08T03:20:{t}+08:00 level=ERROR source=server.go:421 msg=\"llama runner terminated\" error=\"exit status {code}\"\n")
    };
    let signature = |log: String| only_crash(&report(&log)).signature.clone();
    let codes = ["0xc0000409", "0xc0000005", "0xc0000135", "0xe06d7363"];
    let signatures: Vec<_> = codes.iter().map(|c| signature(line(c, "41.451"))).collect();
    for (i, s) in signatures.iter().enumerate() {
        assert!(s.text.contains(codes[i]), "{}", s.text);
        for other in &signatures[i + 1..] {
            assert_ne!(s.id, other.id, "{} and {}", s.text, other.text);
        }
    }
    assert!(signatures[1].text.contains("STATUS_ACCESS_VIOLATION"), "{}", signatures[1].text);
    assert_eq!(signature(line("0xc0000409", "59.000")).id, signatures[0].id);
    // An address is still masked.
    let s = signature("SIGSEGV: segmentation violation\nPC=0x7f27a8e24c47 m=0 sigcode=1 addr=0x206a03fb4\n".into());
    assert_eq!(s.text, "SIGSEGV");
}

#[test]
fn thread_and_task_numbers_stay_out_of_a_signature() {
    let text = logs::signature::normalise_text("slot update_slots: id  2 | task 10300 | thread 7 failed [38593]");
    assert_eq!(text, "slot update_slots: id  N | task N | thread N failed [N]");
}

#[test]
fn a_printed_offload_that_the_log_contradicts() {
    // Issue 28's tester: the first line says no CUDA device, every buffer is on the CPU, yet an offload is printed.
    let log = "\
ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected
llm_load_tensors: offloading 28 repeating layers to GPU
llm_load_tensors: offloaded 29/29 layers to GPU
llm_load_tensors:        CPU buffer size =  4437.80 MiB
";
    let r = report(log);
    let x = &r.facts.placement.contradictions;
    assert_eq!(x.len(), 2, "{x:#?}");
    assert!(x.iter().any(|c| c.lines == vec![3, 1] && c.text.contains("CUDA found no device")), "{x:#?}");
    assert!(r.crashes.is_empty(), "a backend without a device is no crash");
    assert!(r.facts.placement.backends.iter().all(|b| b.backend != "CUDA"), "{:#?}", r.facts.placement.backends);
}

#[test]
fn a_line_that_says_a_library_is_skipped_shows_no_backend() {
    let log = "\
time=2025-10-01T10:00:00.000Z level=INFO source=runner.go:100 msg=\"skipping library\" path=/usr/lib/ollama/vulkan reason=\"skipped at user's request\"
time=2025-10-01T10:00:00.100Z level=INFO source=runner.go:101 msg=\"using library\" path=/usr/lib/ollama/cuda_v12
";
    let r = report(log);
    let seen: Vec<&str> = r.facts.placement.backends.iter().map(|b| b.backend.as_str()).collect();
    assert_eq!(seen, vec!["CUDA"]);
}

#[test]
fn a_warm_up_frame_outranks_the_fragment_rule() {
    // llama-cli has no runner: the stack alone tells the warm-up (gdb frames of ggml's backtrace printer).
    let log = "\
ggml/src/ggml-cuda/ggml-cuda.cu:70: CUDA error
#3  0x00007f3a1c2b4d4b in ggml_abort () from /usr/local/lib/libggml-base.so
#4  0x00007f3a1c41e2a8 in ggml_cuda_compute_forward(ggml_backend_cuda_context&, ggml_tensor*) () from /usr/local/lib/libggml-cuda.so
#5  0x00007f3a1c6aa0b1 in llama_decode () from /usr/local/lib/libllama.so
#6  0x000055d1e3b2a9f0 in llama_init_from_gpt_params(gpt_params&) ()
#7  0x000055d1e3a8f1c2 in main ()
";
    let r = report(log);
    let c = only_crash(&r);
    assert_eq!(c.phase, Phase::FirstCompute, "{}", c.phase_rule);
    assert!(c.phase_rule.contains("warm-up"), "{}", c.phase_rule);
    assert_eq!(c.phase_lines, vec![5]);
}
