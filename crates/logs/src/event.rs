//! The typed events the parser emits, one per log line.
//!
//! Events borrow from the parser's current line (no allocation per line); a consumer that keeps one
//! copies what it needs. Text fields are raw bytes: logs carry invalid UTF-8 and ANSI colour codes, and
//! a renderer escapes them later ([`lossy`] turns them into text).

use std::borrow::Cow;

use crate::time::Timestamp;

/// Raw bytes of a field, as written in the log.
pub type Text<'a> = &'a [u8];

/// Bytes as text, invalid UTF-8 replaced.
pub fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    // Validating first is much faster than `from_utf8_lossy`'s chunk iterator on the valid text that almost every
    // line is; only invalid text pays for the replacement.
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// One log line and what it says.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    /// 1-based line number in the input.
    pub line: u64,
    /// Byte offset of the line's first byte in the input.
    pub offset: u64,
    /// The timestamp the timeline uses for this line, if it has one (see [`crate::prefix`]).
    pub time: Option<Timestamp>,
    /// The whole line as read (prefixes and escape sequences included), cut at the line cap.
    pub raw: Text<'a>,
    /// The message after outer prefixes (journal, Docker, llama.cpp) with ANSI sequences removed.
    pub text: Text<'a>,
    pub flags: LineFlags,
    pub kind: EventKind<'a>,
    /// A message printed on the same line before this one, without a newline between them: KoboldCpp's
    /// `Processing Prompt [BLAS] (512 / 12710 tokens)` progress, which the error that interrupted it continues.
    pub before: Option<Before>,
}

/// The progress a line began with before its message (see [`Event::before`]): kept apart from [`EventKind`], whose
/// size every event pays, as the few words it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Before {
    pub decoding: bool,
    pub tokens: Option<u64>,
}

impl Before {
    /// The progress as its event kind, if `kind` is one.
    pub fn of(kind: &EventKind<'_>) -> Option<Self> {
        match *kind {
            EventKind::Progress { decoding, tokens, .. } => Some(Before { decoding, tokens }),
            _ => None,
        }
    }

    pub fn kind(self) -> EventKind<'static> {
        EventKind::Progress { task: None, decoding: self.decoding, tokens: self.tokens }
    }
}

/// Facts about a line's bytes that a reader of the evidence should know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineFlags {
    /// The line was longer than the cap; `raw` holds its beginning only.
    pub truncated: bool,
    /// The line is not valid UTF-8.
    pub invalid_utf8: bool,
    /// ANSI escape sequences were removed from `text`.
    pub ansi: bool,
    /// The line holds NUL bytes (binary data in a log).
    pub nul: bool,
    /// A timestamp was present but could not be read.
    pub bad_timestamp: bool,
}

/// Which buffer a `… buffer size = X MiB` line reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferKind {
    Model,
    Kv,
    Compute,
    Output,
}

/// Which `print_timing` / `llama_perf_context_print` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingKind {
    PromptEval,
    Eval,
    Total,
}

/// A CUDA/ROCm/MUSA device from `ggml_cuda_init`: `  Device 0: NAME, gfx900:xnack- (0x900), VMM: no,
/// Wave Size: 64[, VRAM: N MiB][, ID: …]` or `  Device 0: NAME, compute capability 8.6, VMM: yes[, …]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuDevice<'a> {
    pub index: u32,
    pub name: Text<'a>,
    /// AMD: the `gcnArchName` (`gfx900:xnack-`).
    pub arch: Option<Text<'a>>,
    /// NVIDIA: `8.6`.
    pub compute_capability: Option<Text<'a>>,
    pub vmm: Option<bool>,
    pub wave_size: Option<u32>,
    pub vram_mib: Option<u64>,
    pub id: Option<Text<'a>>,
}

/// A Vulkan device: `ggml_vulkan: 0 = NAME (DRIVER) | uma: 0 | fp16: 1 | bf16: 0 | warp size: 64 |
/// shared memory: 65536 | int dot: 0 | matrix cores: none`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VulkanDevice<'a> {
    pub index: u32,
    pub name: Text<'a>,
    pub driver: Option<Text<'a>>,
    pub uma: Option<bool>,
    pub fp16: Option<bool>,
    pub bf16: Option<bool>,
    pub warp_size: Option<u32>,
    pub shared_memory: Option<u64>,
    pub int_dot: Option<bool>,
    pub matrix_cores: Option<Text<'a>>,
}

/// Ollama's `msg="inference compute"` line (one per GPU it will use).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InferenceCompute<'a> {
    pub id: Option<Text<'a>>,
    pub library: Option<Text<'a>>,
    pub compute: Option<Text<'a>>,
    pub name: Option<Text<'a>>,
    pub description: Option<Text<'a>>,
    pub libdirs: Option<Text<'a>>,
    pub driver: Option<Text<'a>>,
    pub device_type: Option<Text<'a>>,
    pub total: Option<Text<'a>>,
    pub available: Option<Text<'a>>,
}

/// A frame of a native backtrace: glibc `backtrace_symbols` (`/lib/x.so(sym+0x1e)[0x7f…]`), ggml's unwind
/// fallback (`3: 0x7f… sym`) or gdb (`#3  0x… in sym (args) at file:line`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NativeFrame<'a> {
    pub index: Option<u32>,
    pub module: Option<Text<'a>>,
    pub symbol: Option<Text<'a>>,
}

/// What a line is. Variants name the evidence; `Other` is a line no rule recognised (kept, counted).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EventKind<'a> {
    /// `load_backend: loaded ROCm backend from /…/libggml-hip.so`.
    BackendLoaded {
        backend: Text<'a>,
        path: Text<'a>,
    },
    /// `ggml_cuda_init: found 1 ROCm devices:` / `ggml_vulkan: Found 1 Vulkan devices:`.
    DevicesFound {
        backend: Text<'a>,
        count: u32,
    },
    GpuDevice(GpuDevice<'a>),
    VulkanDevice(VulkanDevice<'a>),
    /// A device listed as available: llama-server's `device_info:` block (`  - Vulkan0 : NAME (T MiB, F MiB
    /// free)`) or `--list-devices` (`  CUDA0: NAME (T MiB, F MiB free)`).
    DeviceListed {
        device: Text<'a>,
        description: Text<'a>,
        total_mib: Option<u64>,
        free_mib: Option<u64>,
    },
    /// `llama_model_load_from_file_impl: using device CUDA0 (NAME) (PCI) - F MiB free`.
    DeviceUsed {
        device: Text<'a>,
        description: Text<'a>,
        free_mib: Option<u64>,
    },
    InferenceCompute(InferenceCompute<'a>),
    /// Ollama starting a runner or llama-server (`msg="starting runner" cmd=…`); `with_model` is false for
    /// the discovery runners that start without `--model`.
    RunnerStarting {
        cmd: Text<'a>,
        with_model: bool,
    },
    /// A model load begins: `llama_model_loader: loaded meta data … from PATH`, Ollama's
    /// `msg="loading model"`, llama-server's `load_model: loading model 'PATH'`.
    ModelLoading {
        path: Option<Text<'a>>,
    },
    /// `offloaded N/M layers to GPU`.
    LayersOffloaded {
        offloaded: u32,
        total: u32,
    },
    /// A flash-attention setting or decision (`flash_attn = auto`, `Flash Attention was auto, set to
    /// enabled`, `msg="enabling flash attention"`).
    FlashAttention {
        setting: Text<'a>,
    },
    /// Graph size: `graph nodes  = N`, `graph splits = N (with bs=512), M (with bs=1)`,
    /// `graph: nodes = A, splits = B`, Ollama's `msg="compute graph" nodes= splits=`.
    Graph {
        nodes: Option<u64>,
        splits: Option<u64>,
    },
    /// `CUDA0 model buffer size = X MiB` and its KV/compute/output kin.
    BufferSize {
        device: Text<'a>,
        buffer: BufferKind,
        mib: f64,
    },
    /// llama.cpp's load-time warm-up decode: `warming up the model with an empty run`.
    Warmup,
    /// `msg="llama runner started in 2.34 seconds"` / `llama-server started in …`.
    RunnerStarted {
        seconds: f64,
    },
    /// llama-server ready: `main: server is listening on …` / `srv … model loaded`.
    ServerReady,
    /// llama-server begins a task: `slot launch_slot_: id  0 | task 3 | processing task`.
    RequestStarted {
        task: Option<u64>,
    },
    /// llama-server finished the prompt of a task: `prompt done, n_tokens = N`.
    PromptDone {
        task: Option<u64>,
    },
    /// llama-server's progress lines while a task runs: `n_gen = 100, tg = …` (decoding) and
    /// `prompt processing, n_tokens = …` (prompt); `decoding` tells which.
    Progress {
        task: Option<u64>,
        decoding: bool,
        tokens: Option<u64>,
    },
    /// llama-server released a slot: `slot release: … stop processing`.
    RequestDone {
        task: Option<u64>,
    },
    /// llama-server shutting down in order: `cleaning up before exit`.
    Shutdown,
    /// `prompt eval time = 12.34 ms / 5 tokens (…)`, `eval time`, `total time`.
    Timing {
        which: TimingKind,
        ms: f64,
        tokens: Option<u64>,
    },
    /// An HTTP request line: Gin `[GIN] … | 500 | 3.4s | 127.0.0.1 | POST "/api/chat"` or llama-server
    /// `log_server_r: request: POST /completion 127.0.0.1 200`.
    HttpRequest {
        status: u16,
        method: Text<'a>,
        path: Text<'a>,
        latency: Option<Text<'a>>,
    },
    /// `msg="failure during GPU discovery" … error="runner crashed"`.
    DiscoveryFailure {
        error: Option<Text<'a>>,
        detail: Option<Text<'a>>,
    },
    /// A GPU that Ollama will not use: `msg="amdgpu is not supported (supported types:[gfx1103])"
    /// gpu_type=gfx1150`, `unsupported Radeon iGPU detected skipping`.
    UnsupportedGpu {
        gpu: Option<Text<'a>>,
        supported: Option<Text<'a>>,
        message: Text<'a>,
    },
    /// `rocBLAS error: Cannot read …/TensileLibrary.dat: No such file or directory for GPU arch : gfx1103`,
    /// `rocblaslt error: …`, `hipBLASLt error: …`.
    BlasError {
        library: Text<'a>,
        message: Text<'a>,
        arch: Option<Text<'a>>,
    },
    /// Go runtime: `SIGSEGV: segmentation violation`, `SIGABRT: abort`, Windows `Exception 0xc0000005 …`.
    Signal {
        signal: Text<'a>,
        description: Text<'a>,
    },
    /// `PC=0x7f27a8e24c47 m=0 sigcode=1 addr=0x206a03fb4`.
    SignalContext {
        pc: Option<Text<'a>>,
        addr: Option<Text<'a>>,
        sigcode: Option<Text<'a>>,
    },
    /// `signal arrived during cgo execution` (or `external code execution`).
    SignalInForeignCode,
    /// Go: `fatal error: …` or `panic: …`.
    GoFatal {
        message: Text<'a>,
    },
    /// `goroutine 29 gp=0xc000585dc0 m=0 mp=0x… [syscall]:`.
    Goroutine {
        id: u64,
        state: Text<'a>,
    },
    /// A Go frame's function line: `github.com/ollama/ollama/llama._Cfunc_llama_decode(0x7f…, {…})`.
    GoFrame {
        function: Text<'a>,
    },
    /// A Go frame's location line: `\t_cgo_gotypes.go:545 +0x4f fp=… sp=… pc=…`.
    GoFrameSource {
        file: Text<'a>,
        line: u32,
    },
    /// `created by net/http.(*Server).Serve in goroutine 1`.
    GoCreatedBy {
        function: Text<'a>,
    },
    /// Other lines of a Go trace: the register dump (`rax    0x0`), `...additional frames elided...`.
    GoTraceDetail,
    NativeFrame(NativeFrame<'a>),
    /// `ggml.c:1234: GGML_ASSERT(cond) failed`.
    GgmlAssert {
        file: Text<'a>,
        line: u32,
        condition: Text<'a>,
    },
    /// `file.cpp:965: fatal error` and other `ggml_abort` messages (`ggml-cuda.cu:94: CUDA error`).
    Abort {
        file: Text<'a>,
        line: u32,
        message: Text<'a>,
    },
    /// `CUDA error: out of memory` / `ROCm error: …` / `MUSA error: …`.
    GpuError {
        api: Text<'a>,
        message: Text<'a>,
    },
    /// `  current device: 0, in function ggml_backend_cuda_synchronize at ggml-cuda.cu:2508`.
    GpuErrorLocation {
        device: Option<i64>,
        function: Text<'a>,
        file: Text<'a>,
        line: u32,
    },
    /// Vulkan device loss: `vk::Queue::submit: ErrorDeviceLost`, `ggml_vulkan: device lost …`.
    DeviceLost {
        message: Text<'a>,
    },
    /// `terminate called after throwing an instance of 'vk::DeviceLostError'`.
    CppTerminate {
        exception: Text<'a>,
    },
    /// Allocation failures: `cudaMalloc failed: out of memory`, `ErrorOutOfDeviceMemory`,
    /// `unable to allocate ROCm0 buffer`, `failed to allocate CUDA0 buffer`.
    OutOfMemory {
        message: Text<'a>,
    },
    /// A process killed by a signal as a shell or the kernel reports it: `Segmentation fault (core
    /// dumped)`, `Aborted (core dumped)`, `… segfault at 0 ip … error 4 in …`.
    ProcessCrash {
        message: Text<'a>,
    },
    /// Ollama: `msg="post predict" error="Post \"http://127.0.0.1:P/completion\": EOF"`.
    PostPredictError {
        error: Option<Text<'a>>,
    },
    /// `msg="llama runner terminated" error="exit status 2"`, `llama-server terminated`,
    /// `llama runner process has terminated: signal: segmentation fault`.
    RunnerTerminated {
        error: Text<'a>,
    },
    /// `msg="error loading llama server"`, `llama_model_load: error loading model: …`.
    LoadError {
        error: Text<'a>,
    },
    /// `msg="llama-server completion error"`, `model runner has unexpectedly stopped`.
    CompletionError {
        message: Text<'a>,
    },
    /// A line that holds a pattern of the milestone table ([`crate::milestones`]): `index` is its row,
    /// `number` the number read after the row's `number_after` (the GPU layers of an allocation attempt).
    Milestone {
        index: u16,
        number: Option<u32>,
    },
    /// ggml's CUDA/ROCm dispatcher names the op whose kernel failed: `ggml_cuda_compute_forward: MUL_MAT
    /// failed` (L `ggml/src/ggml-cuda/ggml-cuda.cu:2480`).
    OpFailed {
        op: Text<'a>,
    },
    /// The Go runtime's dump of the bytes at the faulting PC after a SIGILL: `instruction bytes: 0x62 0xf2 …`.
    InstructionBytes {
        bytes: Text<'a>,
    },
    /// An Ollama slog line at WARN or ERROR that no other rule names.
    Diagnostic {
        level: Text<'a>,
        msg: Text<'a>,
    },
    /// The server could not listen on its port: llama-server's `couldn't bind HTTP server socket, hostname: H,
    /// port: P` (L tools/server/server-http.cpp:517), Go's `listen tcp H:P: bind: address already in use`.
    BindFailed {
        message: Text<'a>,
    },
    /// A line of the kernel's GPU driver (amdgpu, NVIDIA's NVRM, i915, xe) that users paste beside the runner's log: a
    /// GPU job that timed out on a ring, the process it belonged to, a GPU or ring reset, a device coredump, a GPU page
    /// fault, an NVIDIA Xid, an Intel GPU hang.
    GpuDriver(GpuDriver<'a>),
    /// A register of the Go runtime's crash dump (`rax    0x0`, `rip    0x7f…`) read outside a goroutine dump:
    /// the runtime prints registers only when a fatal signal kills it, so a paste that starts there is a crash
    /// whose header is cut.
    RegisterDump,
    /// A line no rule recognised.
    Other,
}

/// What a kernel GPU-driver line says (amdgpu, `drivers/gpu/drm/amd/amdgpu/amdgpu_job.c` and friends; NVIDIA's `NVRM: Xid`;
/// i915's and xe's hang and reset lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuDriverEvent {
    /// `ring gfx_0.0.0 timeout, signaled seq=166926, emitted seq=166928`: a GPU job did not finish in time.
    RingTimeout,
    /// `Process information: process ollama pid 1234 thread ollama pid 1240` / `Process llama-server pid 12519 …`:
    /// whose job it was.
    Process,
    /// `GPU reset begin!`, `Starting gfx_0.0.0 ring reset`; i915's `Resetting rcs0 for preemption time out`, xe's
    /// `Engine reset: engine_class=ccs, …`.
    ResetBegin,
    /// `GPU reset succeeded, trying to resume`, `GPU reset(2) succeeded!`, `Ring gfx_0.0.0 reset succeeded`.
    ResetSucceeded,
    /// `Ring gfx_0.0.0 reset failed`, `GPU reset(…) failed`.
    ResetFailed,
    /// `[drm] AMDGPU device coredump file has been created`, `Check your /sys/class/drm/card1/device/devcoredump/data`.
    Coredump,
    /// `[gfxhub] page fault (src_id:0 ring:32 vmid:0 pasid:0, for process X pid N …)`, `VM_L2_PROTECTION_FAULT_STATUS:…`.
    PageFault,
    /// NVIDIA's driver reports an error by number: `NVRM: Xid (PCI:0000:01:00): 31, pid=14292, name=python, Ch 00000030,
    /// … MMU Fault: …` (the number is [`GpuDriver::code`]; NVIDIA's Xid catalog says what each means).
    Xid,
    /// Intel's drivers saw a GPU job hang: i915's `GPU HANG: ecode 12:1:0020fffe, in xdg-desktop-por [1676]`, xe's
    /// `Timedout job: seqno=…, guc_id=…, flags=0x… in llama-bench [260404]`.
    Hang,
}

/// A kernel GPU-driver line: what it says, the ring (engine) and the process it names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuDriver<'a> {
    pub event: GpuDriverEvent,
    pub ring: Option<Text<'a>>,
    pub process: Option<Text<'a>>,
    pub pid: Option<u32>,
    /// An NVIDIA Xid's number.
    pub code: Option<u32>,
}

impl EventKind<'_> {
    /// Stable snake_case names of the kinds, in [`EventKind::index`] order.
    pub const NAMES: [&'static str; 56] = [
        "backend_loaded",
        "devices_found",
        "gpu_device",
        "vulkan_device",
        "device_listed",
        "device_used",
        "inference_compute",
        "runner_starting",
        "model_loading",
        "layers_offloaded",
        "flash_attention",
        "graph",
        "buffer_size",
        "warmup",
        "runner_started",
        "server_ready",
        "request_started",
        "prompt_done",
        "progress",
        "request_done",
        "shutdown",
        "timing",
        "http_request",
        "discovery_failure",
        "unsupported_gpu",
        "blas_error",
        "signal",
        "signal_context",
        "signal_in_cgo",
        "go_fatal",
        "goroutine",
        "go_frame",
        "go_frame_source",
        "go_created_by",
        "go_trace_detail",
        "native_frame",
        "ggml_assert",
        "abort",
        "gpu_error",
        "gpu_error_location",
        "device_lost",
        "cpp_terminate",
        "out_of_memory",
        "process_crash",
        "post_predict_error",
        "runner_terminated",
        "load_error",
        "completion_error",
        "milestone",
        "op_failed",
        "instruction_bytes",
        "diagnostic",
        "bind_failed",
        "gpu_driver",
        "register_dump",
        "other",
    ];

    /// Position of this kind in [`EventKind::NAMES`] (for counting without a map lookup).
    pub fn index(&self) -> usize {
        use EventKind::*;
        match self {
            BackendLoaded { .. } => 0,
            DevicesFound { .. } => 1,
            GpuDevice(_) => 2,
            VulkanDevice(_) => 3,
            DeviceListed { .. } => 4,
            DeviceUsed { .. } => 5,
            InferenceCompute(_) => 6,
            RunnerStarting { .. } => 7,
            ModelLoading { .. } => 8,
            LayersOffloaded { .. } => 9,
            FlashAttention { .. } => 10,
            Graph { .. } => 11,
            BufferSize { .. } => 12,
            Warmup => 13,
            RunnerStarted { .. } => 14,
            ServerReady => 15,
            RequestStarted { .. } => 16,
            PromptDone { .. } => 17,
            Progress { .. } => 18,
            RequestDone { .. } => 19,
            Shutdown => 20,
            Timing { .. } => 21,
            HttpRequest { .. } => 22,
            DiscoveryFailure { .. } => 23,
            UnsupportedGpu { .. } => 24,
            BlasError { .. } => 25,
            Signal { .. } => 26,
            SignalContext { .. } => 27,
            SignalInForeignCode => 28,
            GoFatal { .. } => 29,
            Goroutine { .. } => 30,
            GoFrame { .. } => 31,
            GoFrameSource { .. } => 32,
            GoCreatedBy { .. } => 33,
            GoTraceDetail => 34,
            NativeFrame(_) => 35,
            GgmlAssert { .. } => 36,
            Abort { .. } => 37,
            GpuError { .. } => 38,
            GpuErrorLocation { .. } => 39,
            DeviceLost { .. } => 40,
            CppTerminate { .. } => 41,
            OutOfMemory { .. } => 42,
            ProcessCrash { .. } => 43,
            PostPredictError { .. } => 44,
            RunnerTerminated { .. } => 45,
            LoadError { .. } => 46,
            CompletionError { .. } => 47,
            Milestone { .. } => 48,
            OpFailed { .. } => 49,
            InstructionBytes { .. } => 50,
            Diagnostic { .. } => 51,
            BindFailed { .. } => 52,
            GpuDriver(_) => 53,
            RegisterDump => 54,
            Other => 55,
        }
    }

    /// A stable snake_case name for counts, JSON and the text timeline.
    pub fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }

    /// Whether this line by itself shows that something failed (a crash, an abort, a GPU error): such a
    /// line opens a crash incident in [`crate::Analyzer`].
    pub fn is_fatal(&self) -> bool {
        use EventKind::*;
        matches!(
            self,
            DiscoveryFailure { .. }
                | BlasError { .. }
                | Signal { .. }
                | SignalInForeignCode
                | GoFatal { .. }
                | GgmlAssert { .. }
                | Abort { .. }
                | GpuError { .. }
                | DeviceLost { .. }
                | CppTerminate { .. }
                | OutOfMemory { .. }
                | ProcessCrash { .. }
                | PostPredictError { .. }
                | RunnerTerminated { .. }
                | LoadError { .. }
                | CompletionError { .. }
                | OpFailed { .. }
                | GpuDriver(crate::event::GpuDriver {
                    event: GpuDriverEvent::RingTimeout
                        | GpuDriverEvent::PageFault
                        | GpuDriverEvent::Coredump
                        | GpuDriverEvent::ResetBegin
                        | GpuDriverEvent::Xid
                        | GpuDriverEvent::Hang,
                    ..
                })
        )
    }

    /// Lines that belong to a stack trace: they go to a crash's frames, not to the timeline.
    pub fn is_trace(&self) -> bool {
        use EventKind::*;
        matches!(
            self,
            Goroutine { .. }
                | GoFrame { .. }
                | GoFrameSource { .. }
                | GoCreatedBy { .. }
                | GoTraceDetail
                | NativeFrame(_)
                | RegisterDump
        )
    }
}
