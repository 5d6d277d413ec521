//! The records of a trace file and their writers: one function per record kind, so that every
//! observer writes the same keys (`docs/trace-format.md` documents each). A record is one JSON
//! object on one line; its kind is the first key of [`kind::ALL`] it contains.
//!
//! The writers take plain values and write into any [`Out`]; none allocates, so the crash path can
//! use them from a signal handler with a [`crate::json::FixedBuf`].

use crate::json::{put_u32x3, put_u64, Obj, Out};

/// The key that gives a record its kind.
pub mod kind {
    pub const HEADER: &str = "format";
    pub const KERNEL: &str = "kernel";
    pub const WINDOW: &str = "window";
    pub const WARNING: &str = "warning";
    pub const END: &str = "end_ns";
    pub const TRUNCATED: &str = "truncated";
    /// Version 3.
    pub const CRASH: &str = "crash";
    /// Version 3.
    pub const SIGNAL_RETURNED: &str = "signal_returned";
    /// Version 3.
    pub const DEVICE: &str = "device";
    /// Version 3 (added later; a reader that does not know it skips it as an unknown line): a Vulkan
    /// call returned `VK_ERROR_DEVICE_LOST`.
    pub const DEVICE_LOST: &str = "device_lost";
    /// In the order a reader tests them: a Vulkan pipeline's definition has a `device` field, so
    /// `kernel` must win over `device`. (`device_lost` records carry no top-level `device` field, so
    /// a reader that does not know them cannot take one for a device record.)
    pub const ALL: [&str; 10] =
        [HEADER, KERNEL, WINDOW, WARNING, END, TRUNCATED, CRASH, SIGNAL_RETURNED, DEVICE_LOST, DEVICE];
}

/// Values of a kernel definition's `api` field: how the kernel reached the runtime.
pub mod api {
    pub const CUDA: &str = "cuda";
    pub const CU: &str = "cu";
    pub const HIP: &str = "hip";
    pub const HIP_MODULE: &str = "hip_module";
    /// Version 3: a Vulkan compute pipeline.
    pub const VULKAN: &str = "vulkan";
    pub const OVERFLOW: &str = "overflow";
}

/// Values of a kernel definition's `source` field: where its name came from.
pub mod source {
    pub const REGISTER: &str = "register";
    pub const GET_FUNCTION: &str = "get_function";
    pub const RUNTIME: &str = "runtime";
    pub const SYNTHETIC: &str = "synthetic";
    pub const NONE: &str = "none";
    /// Version 3: a Vulkan pipeline named by `vkSetDebugUtilsObjectNameEXT`.
    pub const DEBUG_NAME: &str = "debug_name";
    /// Version 3: a Vulkan pipeline without a name, named `spirv:<hash>` after its shader module.
    pub const SPIRV_HASH: &str = "spirv_hash";
}

/// Warning codes.
pub mod warning {
    pub const KERNEL_TABLE_FULL: &str = "kernel_table_full";
    pub const UNKNOWN_GRAPH_EXEC: &str = "unknown_graph_exec";
    pub const UNATTRIBUTED_CAPTURE: &str = "unattributed_capture";
    pub const STALE_CAPTURE: &str = "stale_capture";
}

/// Values of the `truncated` record's kind key.
pub mod truncated {
    pub const BUDGET: &str = "budget";
    pub const WRITE_ERROR: &str = "write_error";
}

/// Field names, per record.
pub mod field {
    pub const VERSION: &str = "version";
    pub const PID: &str = "pid";
    pub const PPID: &str = "ppid";
    pub const EXE: &str = "exe";
    pub const CMDLINE: &str = "cmdline";
    pub const CLOCK: &str = "clock";
    pub const START_NS: &str = "start_ns";
    pub const INTERVAL_MS: &str = "interval_ms";
    pub const SHAPE_BUCKETS: &str = "shape_buckets";
    pub const MAX_KERNELS: &str = "max_kernels";
    pub const MAX_BYTES: &str = "max_bytes";
    pub const OBSERVER: &str = "observer";
    pub const WRITER: &str = "writer";

    pub const NAME: &str = "name";
    pub const API: &str = "api";
    pub const SOURCE: &str = "source";
    pub const DEVICE: &str = "device";
    pub const SPIRV_HASH: &str = "spirv_hash";
    pub const LOCAL_SIZE: &str = "local_size";
    pub const SPIRV_OBJECT: &str = "spirv_object";
    pub const STATS: &str = "stats";
    pub const EXECUTABLE: &str = "executable";
    pub const VALUE: &str = "value";

    pub const COUNTS: &str = "counts";
    pub const ERRORS: &str = "errors";
    pub const GRAPH: &str = "graph";
    pub const CAPTURED: &str = "captured";
    pub const SHAPES: &str = "shapes";
    pub const OTHER_SHAPES: &str = "other_shapes";
    pub const GRAPH_LAUNCHES: &str = "graph_launches";
    pub const UNKNOWN_GRAPH_LAUNCHES: &str = "unknown_graph_launches";
    pub const UNATTRIBUTED_CAPTURES: &str = "unattributed_captures";
    pub const EXPIRED_CAPTURES: &str = "expired_captures";
    pub const SUBMITS: &str = "submits";

    pub const DETAIL: &str = "detail";
    pub const REASON: &str = "reason";
    pub const AT_NS: &str = "at_ns";
    pub const BYTES: &str = "bytes";
    pub const ERROR: &str = "error";

    pub const SIGNAL: &str = "signal";
    pub const CODE: &str = "code";
    pub const ADDR: &str = "addr";
    pub const SENDER_PID: &str = "sender_pid";
    pub const SEQ: &str = "seq";
    pub const TID: &str = "tid";
    pub const FLUSHED: &str = "flushed";
    pub const THREADS: &str = "threads";
    pub const IN_FLIGHT: &str = "in_flight";
    pub const LAUNCHES: &str = "launches";
    pub const QUEUES: &str = "queues";
    pub const QUEUE: &str = "queue";
    pub const DISPATCHES: &str = "dispatches";
    pub const OMITTED: &str = "omitted";
    pub const RESULT: &str = "result";

    pub const DRIVER: &str = "driver";
    pub const DRIVER_INFO: &str = "driver_info";
    pub const DRIVER_VERSION: &str = "driver_version";
    pub const API_VERSION: &str = "api_version";
    pub const VENDOR_ID: &str = "vendor_id";
    pub const DEVICE_ID: &str = "device_id";
    pub const DEVICE_TYPE: &str = "device_type";
    pub const SUBGROUP_SIZE: &str = "subgroup_size";
    pub const SUBGROUP_SIZE_MIN: &str = "subgroup_size_min";
    pub const SUBGROUP_SIZE_MAX: &str = "subgroup_size_max";
    pub const INTEGER_DOT: &str = "integer_dot";
    pub const COOPERATIVE_MATRIX: &str = "cooperative_matrix";
    pub const SHADER_CORE_COUNT: &str = "shader_core_count";
    pub const SHADER_CORE_COUNT_FROM: &str = "shader_core_count_from";
    pub const FLAGS: &str = "flags";
}

/// `/proc/self/cmdline` bytes kept in the header: enough to tell processes apart (`ollama runner
/// --model …`), bounded for huge command lines.
pub const CMDLINE_MAX_BYTES: usize = 4096;

/// The first record of every file.
#[derive(Clone, Copy, Debug)]
pub struct Header<'a> {
    pub pid: u32,
    pub ppid: u32,
    /// `/proc/self/exe`.
    pub exe: &'a [u8],
    /// `/proc/self/cmdline` as read: arguments separated (and ended) by NUL bytes.
    pub cmdline: &'a [u8],
    pub start_ns: u64,
    pub interval_ms: u64,
    pub shape_buckets: u32,
    pub max_kernels: u32,
    pub max_bytes: u64,
    /// Version of the program that writes the trace.
    pub observer: &'a str,
    /// Which program writes it (`backscope-observer`, a Vulkan layer); left out when empty.
    pub writer: &'a str,
}

pub fn header(out: &mut (impl Out + ?Sized), h: &Header<'_>) {
    let mut o = Obj::begin(out);
    o.str(kind::HEADER, crate::FORMAT).u64(field::VERSION, crate::VERSION.into());
    o.u64(field::PID, h.pid.into()).u64(field::PPID, h.ppid.into()).bytes(field::EXE, h.exe);
    let args = o.key(field::CMDLINE);
    args.put(b"[");
    let mut total = 0;
    for (i, arg) in h.cmdline.split(|&c| c == 0).filter(|a| !a.is_empty()).enumerate() {
        total += arg.len();
        if total > CMDLINE_MAX_BYTES {
            break;
        }
        if i > 0 {
            args.put(b",");
        }
        crate::json::put_str(args, arg);
    }
    args.put(b"]");
    o.str(field::CLOCK, crate::clock::NAME).u64(field::START_NS, h.start_ns).u64(field::INTERVAL_MS, h.interval_ms);
    o.u64(field::SHAPE_BUCKETS, h.shape_buckets.into()).u64(field::MAX_KERNELS, h.max_kernels.into());
    o.u64(field::MAX_BYTES, h.max_bytes).str(field::OBSERVER, h.observer);
    if !h.writer.is_empty() {
        o.str(field::WRITER, h.writer);
    }
    o.end_line();
}

/// One statistic a driver reports for a compiled pipeline (`VK_KHR_pipeline_executable_properties`:
/// registers, spills, …).
#[derive(Clone, Copy, Debug)]
pub struct PipelineStat<'a> {
    /// The executable (shader stage) it belongs to, as the driver names it.
    pub executable: &'a str,
    pub name: &'a str,
    pub value: f64,
}

/// A kernel definition: a CUDA/HIP kernel, or a Vulkan compute pipeline.
#[derive(Clone, Copy, Debug)]
pub struct KernelDef<'a> {
    pub id: u32,
    pub name: &'a [u8],
    /// One of [`api`].
    pub api: &'a str,
    /// One of [`source`].
    pub source: &'a str,
    /// Vulkan: the `device` record's id the pipeline belongs to.
    pub device: Option<u32>,
    /// Vulkan: hash of the pipeline's SPIR-V (the key to the shaders embedded in a library).
    pub spirv_hash: Option<&'a str>,
    /// Vulkan: the compute shader's workgroup size.
    pub local_size: Option<[u32; 3]>,
    /// Vulkan: the loaded object (`libggml-vulkan.so`) whose bytes the shader module was created
    /// from, when they came straight from one; where backscope looks the `spirv_hash` up.
    pub spirv_object: Option<&'a [u8]>,
    pub stats: &'a [PipelineStat<'a>],
}

impl<'a> KernelDef<'a> {
    /// A CUDA/HIP kernel: id, name, api and source only.
    pub fn new(id: u32, name: &'a [u8], api: &'a str, source: &'a str) -> KernelDef<'a> {
        KernelDef {
            id,
            name,
            api,
            source,
            device: None,
            spirv_hash: None,
            local_size: None,
            spirv_object: None,
            stats: &[],
        }
    }
}

pub fn kernel(out: &mut (impl Out + ?Sized), k: &KernelDef<'_>) {
    let mut o = Obj::begin(out);
    o.u64(kind::KERNEL, k.id.into()).bytes(field::NAME, k.name).str(field::API, k.api).str(field::SOURCE, k.source);
    if let Some(device) = k.device {
        o.u64(field::DEVICE, device.into());
    }
    o.opt_str(field::SPIRV_HASH, k.spirv_hash);
    if let Some(local_size) = k.local_size {
        o.u32x3(field::LOCAL_SIZE, local_size);
    }
    if let Some(object) = k.spirv_object {
        o.bytes(field::SPIRV_OBJECT, object);
    }
    if !k.stats.is_empty() {
        let list = o.key(field::STATS);
        list.put(b"[");
        for (i, stat) in k.stats.iter().enumerate() {
            if i > 0 {
                list.put(b",");
            }
            let mut s = Obj::begin(&mut *list);
            s.str(field::EXECUTABLE, stat.executable).str(field::NAME, stat.name).f64(field::VALUE, stat.value);
            s.end();
        }
        list.put(b"]");
    }
    o.end_line();
}

/// Executions of one kernel with one launch shape in one window. For Vulkan, `grid` is the
/// dispatch's workgroup counts (`[0,0,0]` for an indirect dispatch, whose counts live in GPU
/// memory) and `block` the pipeline's workgroup size (`[0,0,0]` when unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeCount {
    pub kernel: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub count: u64,
}

/// What happened between `t0` and `t1`. Per-kernel lists hold `(id, n)` with `n > 0`; empty lists
/// and zero scalars are left out.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window<'a> {
    pub t0: u64,
    pub t1: u64,
    pub counts: &'a [(u32, u64)],
    pub errors: &'a [(u32, u64)],
    pub graph: &'a [(u32, u64)],
    pub captured: &'a [(u32, u64)],
    pub shapes: &'a [ShapeCount],
    pub other_shapes: &'a [(u32, u64)],
    pub graph_launches: u64,
    pub unknown_graph_launches: u64,
    pub unattributed_captures: u64,
    pub expired_captures: u64,
    /// Vulkan: `vkQueueSubmit*` calls that carried the window's dispatches.
    pub submits: u64,
}

pub fn window(out: &mut (impl Out + ?Sized), w: &Window<'_>) {
    let mut o = Obj::begin(out);
    let span = o.key(kind::WINDOW);
    span.put(b"[");
    put_u64(span, w.t0);
    span.put(b",");
    put_u64(span, w.t1);
    span.put(b"]");
    o.pairs(field::COUNTS, w.counts).pairs(field::ERRORS, w.errors);
    o.pairs(field::GRAPH, w.graph).pairs(field::CAPTURED, w.captured);
    if !w.shapes.is_empty() {
        let list = o.key(field::SHAPES);
        list.put(b"[");
        for (i, s) in w.shapes.iter().enumerate() {
            list.put(if i == 0 { b"[" } else { b",[" });
            put_u64(list, s.kernel.into());
            list.put(b",");
            put_u32x3(list, s.grid);
            list.put(b",");
            put_u32x3(list, s.block);
            list.put(b",");
            put_u64(list, s.count);
            list.put(b"]");
        }
        list.put(b"]");
    }
    o.pairs(field::OTHER_SHAPES, w.other_shapes);
    o.u64_nonzero(field::GRAPH_LAUNCHES, w.graph_launches);
    o.u64_nonzero(field::UNKNOWN_GRAPH_LAUNCHES, w.unknown_graph_launches);
    o.u64_nonzero(field::UNATTRIBUTED_CAPTURES, w.unattributed_captures);
    o.u64_nonzero(field::EXPIRED_CAPTURES, w.expired_captures);
    o.u64_nonzero(field::SUBMITS, w.submits);
    o.end_line();
}

pub fn warning_record(out: &mut (impl Out + ?Sized), code: &str, detail: &str) {
    let mut o = Obj::begin(out);
    o.str(kind::WARNING, code).str(field::DETAIL, detail);
    o.end_line();
}

/// The end record of a process that reached its exit flush.
pub fn end(out: &mut (impl Out + ?Sized), end_ns: u64) {
    let mut o = Obj::begin(out);
    o.u64(kind::END, end_ns).str(field::REASON, "exit");
    o.end_line();
}

/// The last record of a trace whose byte budget was spent.
pub fn truncated_budget(out: &mut (impl Out + ?Sized), at_ns: u64, bytes: u64, max_bytes: u64) {
    let mut o = Obj::begin(out);
    o.str(kind::TRUNCATED, truncated::BUDGET).u64(field::AT_NS, at_ns).u64(field::BYTES, bytes);
    o.u64(field::MAX_BYTES, max_bytes);
    o.end_line();
}

/// The last record of a trace whose write failed.
pub fn truncated_write_error(out: &mut (impl Out + ?Sized), at_ns: u64, bytes: u64, error: &str) {
    let mut o = Obj::begin(out);
    o.str(kind::TRUNCATED, truncated::WRITE_ERROR).u64(field::AT_NS, at_ns).u64(field::BYTES, bytes);
    o.str(field::ERROR, error);
    o.end_line();
}

/// One launch remembered for the crash record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashLaunch {
    pub kernel: u32,
    /// Start of the window the launch was counted in (the open window's start when it happened).
    pub window_t0: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// The launch call returned an error.
    pub failed: bool,
}

/// One thread in a crash record: the runtime call it was inside, and its last launches, oldest first.
#[derive(Clone, Copy, Debug)]
pub struct CrashThread<'a> {
    pub tid: u32,
    pub in_flight: Option<&'a str>,
    pub launches: &'a [CrashLaunch],
}

/// A fatal signal as the observer saw it, before the program's own handler (or the default action)
/// took it.
#[derive(Clone, Copy, Debug)]
pub struct Crash<'a> {
    /// Number of this crash record in the process, from 1.
    pub seq: u32,
    pub signal: i32,
    /// `si_code`: > 0 for a fault the kernel raised, <= 0 for a signal some process sent.
    pub code: i32,
    /// `si_addr`: the faulting address of SIGSEGV/SIGBUS/SIGILL/SIGFPE.
    pub addr: u64,
    /// `si_pid` of a signal sent by a process (`code <= 0`).
    pub sender_pid: Option<u32>,
    pub at_ns: u64,
    /// The thread that received the signal; it comes first in `threads`.
    pub tid: u32,
    /// The window open at the signal was written before this record.
    pub flushed: bool,
    pub threads: &'a [CrashThread<'a>],
}

/// The conventional name of a signal, or "" for one not listed.
pub fn signal_name(signal: i32) -> &'static str {
    // Linux numbering (x86-64 and AArch64 share it for these).
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        31 => "SIGSYS",
        _ => "",
    }
}

pub fn crash(out: &mut (impl Out + ?Sized), c: &Crash<'_>) {
    crash_with_queues(out, c, &[]);
}

/// A crash record with the Vulkan queues' last submitted dispatches (written by the Vulkan layer;
/// `queues` is left out when empty, so [`crash`] writes the CUDA/HIP observer's record unchanged).
pub fn crash_with_queues(out: &mut (impl Out + ?Sized), c: &Crash<'_>, queues: &[CrashQueue<'_>]) {
    let mut o = Obj::begin(out);
    o.i64(kind::CRASH, c.signal.into()).str(field::SIGNAL, signal_name(c.signal));
    o.i64(field::CODE, c.code.into()).u64(field::ADDR, c.addr);
    if let Some(sender) = c.sender_pid {
        o.u64(field::SENDER_PID, sender.into());
    }
    o.u64(field::AT_NS, c.at_ns).u64(field::SEQ, c.seq.into()).u64(field::TID, c.tid.into());
    o.bool(field::FLUSHED, c.flushed);
    let list = o.key(field::THREADS);
    list.put(b"[");
    for (i, t) in c.threads.iter().enumerate() {
        if i > 0 {
            list.put(b",");
        }
        let mut th = Obj::begin(&mut *list);
        th.u64(field::TID, t.tid.into()).opt_str(field::IN_FLIGHT, t.in_flight);
        let launches = th.key(field::LAUNCHES);
        launches.put(b"[");
        for (j, l) in t.launches.iter().enumerate() {
            launches.put(if j == 0 { b"[" } else { b",[" });
            put_u64(launches, l.kernel.into());
            launches.put(b",");
            put_u64(launches, l.window_t0);
            launches.put(b",");
            put_u32x3(launches, l.grid);
            launches.put(b",");
            put_u32x3(launches, l.block);
            launches.put(if l.failed { b",1]" } else { b",0]" });
        }
        launches.put(b"]");
        th.end();
    }
    list.put(b"]");
    put_queues(&mut o, queues);
    o.end_line();
}

/// One dispatch (or several equal ones in a row) a Vulkan queue was given, remembered for the crash
/// and device-lost records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueDispatch<'a> {
    /// The pipeline's kernel id.
    pub kernel: u32,
    /// The queue's submission (`vkQueueSubmit*` call with dispatches) that carried it, from 1.
    pub submit: u64,
    /// Workgroup counts (`[0,0,0]` for an indirect dispatch).
    pub grid: [u32; 3],
    /// Equal consecutive dispatches of one command buffer.
    pub count: u32,
    /// The innermost debug label open when they were recorded (`vkCmdBeginDebugUtilsLabelEXT`: ggml-vulkan's
    /// graph node, `MUL_MAT blk.0.attn_q`); empty for none.
    pub label: &'a [u8],
}

/// One Vulkan queue's last submitted dispatches, oldest first.
#[derive(Clone, Copy, Debug)]
pub struct CrashQueue<'a> {
    /// The queue's number in the layer's table (in the order queues first submitted dispatches).
    pub queue: u32,
    /// The `device` record of its device, when described.
    pub device: Option<u32>,
    /// Submissions with dispatches on this queue so far.
    pub submits: u64,
    pub dispatches: &'a [QueueDispatch<'a>],
    /// Dispatches left out of the list because their pipeline's definition could not be written.
    pub omitted: u32,
}

fn put_queues<O: Out + ?Sized>(o: &mut Obj<'_, O>, queues: &[CrashQueue<'_>]) {
    if queues.is_empty() {
        return;
    }
    let list = o.key(field::QUEUES);
    list.put(b"[");
    for (i, q) in queues.iter().enumerate() {
        if i > 0 {
            list.put(b",");
        }
        let mut qo = Obj::begin(&mut *list);
        qo.u64(field::QUEUE, q.queue.into());
        if let Some(device) = q.device {
            qo.u64(field::DEVICE, device.into());
        }
        qo.u64(field::SUBMITS, q.submits);
        let dispatches = qo.key(field::DISPATCHES);
        dispatches.put(b"[");
        for (j, d) in q.dispatches.iter().enumerate() {
            dispatches.put(if j == 0 { b"[" } else { b",[" });
            put_u64(dispatches, d.kernel.into());
            dispatches.put(b",");
            put_u64(dispatches, d.submit);
            dispatches.put(b",");
            put_u32x3(dispatches, d.grid);
            dispatches.put(b",");
            put_u64(dispatches, d.count.into());
            if !d.label.is_empty() {
                dispatches.put(b",");
                crate::json::put_str(dispatches, d.label);
            }
            dispatches.put(b"]");
        }
        dispatches.put(b"]");
        qo.u64_nonzero(field::OMITTED, q.omitted.into());
        qo.end();
    }
    list.put(b"]");
}

/// A Vulkan call that returned `VK_ERROR_DEVICE_LOST`, as the layer saw it return.
#[derive(Clone, Copy, Debug)]
pub struct DeviceLost<'a> {
    /// The call (`vkQueueSubmit`, `vkWaitForFences`, …).
    pub call: &'a str,
    /// Its `VkResult` (-4).
    pub result: i32,
    pub at_ns: u64,
    /// The thread that made the call.
    pub tid: u32,
    /// Number of this device-lost record in the file, from 1.
    pub seq: u32,
}

pub fn device_lost(out: &mut (impl Out + ?Sized), d: &DeviceLost<'_>, queues: &[CrashQueue<'_>]) {
    let mut o = Obj::begin(out);
    o.str(kind::DEVICE_LOST, d.call).i64(field::RESULT, d.result.into());
    o.u64(field::AT_NS, d.at_ns).u64(field::SEQ, d.seq.into()).u64(field::TID, d.tid.into());
    put_queues(&mut o, queues);
    o.end_line();
}

/// The program's own handler, called after crash record `seq`, returned: the program may have
/// recovered from the signal (a Go panic in Go code does), so that record may not mark its end.
pub fn signal_returned(out: &mut (impl Out + ?Sized), seq: u32, at_ns: u64) {
    let mut o = Obj::begin(out);
    o.u64(kind::SIGNAL_RETURNED, seq.into()).u64(field::AT_NS, at_ns);
    o.end_line();
}

/// A GPU device as a Vulkan layer sees it: the facts ggml-vulkan chooses its shader variants by.
#[derive(Clone, Copy, Debug, Default)]
pub struct Device<'a> {
    pub id: u32,
    /// One of [`api`] (`vulkan`).
    pub api: &'a str,
    pub name: &'a [u8],
    /// `VkPhysicalDeviceDriverProperties::driverName` (`radv`, `NVIDIA`, `llvmpipe`).
    pub driver: &'a [u8],
    /// `driverInfo` (the driver's version text).
    pub driver_info: &'a [u8],
    /// `VkPhysicalDeviceProperties::driverVersion`, vendor-encoded.
    pub driver_version: u32,
    /// `apiVersion` as major, minor, patch.
    pub api_version: [u32; 3],
    pub vendor_id: u32,
    pub device_id: u32,
    /// `discrete`, `integrated`, `virtual`, `cpu` or `other`.
    pub device_type: &'a str,
    pub subgroup_size: u32,
    /// `VK_EXT_subgroup_size_control` bounds; 0 when not offered.
    pub subgroup_size_min: u32,
    pub subgroup_size_max: u32,
    /// `VK_KHR_shader_integer_dot_product` (ggml's `int dot`).
    pub integer_dot: bool,
    /// `VK_KHR_cooperative_matrix` (or NVIDIA's) (ggml's `matrix cores`).
    pub cooperative_matrix: bool,
    /// The shader cores (SMs, active CUs) the driver reports, where ggml-vulkan reads them; with the extension
    /// it came from (`VK_NV_shader_sm_builtins`, `VK_AMD_shader_core_properties2`), or `none` with 0. `None`
    /// leaves the fields out.
    pub shader_core_count: Option<(u32, &'a str)>,
    /// Further yes/no facts by name (subgroup arithmetic, fp16, bf16 …).
    pub flags: &'a [(&'a str, bool)],
}

pub fn device(out: &mut (impl Out + ?Sized), d: &Device<'_>) {
    let mut o = Obj::begin(out);
    o.u64(kind::DEVICE, d.id.into()).str(field::API, d.api).bytes(field::NAME, d.name);
    o.bytes(field::DRIVER, d.driver).bytes(field::DRIVER_INFO, d.driver_info);
    o.u64(field::DRIVER_VERSION, d.driver_version.into()).u32x3(field::API_VERSION, d.api_version);
    o.u64(field::VENDOR_ID, d.vendor_id.into()).u64(field::DEVICE_ID, d.device_id.into());
    o.str(field::DEVICE_TYPE, d.device_type).u64(field::SUBGROUP_SIZE, d.subgroup_size.into());
    o.u64(field::SUBGROUP_SIZE_MIN, d.subgroup_size_min.into())
        .u64(field::SUBGROUP_SIZE_MAX, d.subgroup_size_max.into());
    o.bool(field::INTEGER_DOT, d.integer_dot).bool(field::COOPERATIVE_MATRIX, d.cooperative_matrix);
    if let Some((count, from)) = d.shader_core_count {
        o.u64(field::SHADER_CORE_COUNT, count.into()).str(field::SHADER_CORE_COUNT_FROM, from);
    }
    if !d.flags.is_empty() {
        let flags = o.key(field::FLAGS);
        let mut f = Obj::begin(&mut *flags);
        for &(name, value) in d.flags {
            f.bool(name, value);
        }
        f.end();
    }
    o.end_line();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    /// The examples of docs/trace-format.md, written by these functions.
    #[test]
    fn records_match_the_documented_examples() {
        let h = Header {
            pid: 4242,
            ppid: 4200,
            exe: b"/usr/bin/llama-server",
            cmdline: b"llama-server\0-m\0m.gguf\0",
            start_ns: 1254000000000,
            interval_ms: 50,
            shape_buckets: 8,
            max_kernels: 1048576,
            max_bytes: 1073741824,
            observer: "0.1.0",
            writer: "",
        };
        assert_eq!(
            line(|o| header(o, &h)),
            "{\"format\":\"backscope-trace\",\"version\":3,\"pid\":4242,\"ppid\":4200,\"exe\":\"/usr/bin/llama-server\",\
             \"cmdline\":[\"llama-server\",\"-m\",\"m.gguf\"],\"clock\":\"monotonic\",\"start_ns\":1254000000000,\
             \"interval_ms\":50,\"shape_buckets\":8,\"max_kernels\":1048576,\"max_bytes\":1073741824,\"observer\":\"0.1.0\"}\n"
        );
        let name = b"_Z13mul_mat_vec_qIL9ggml_type12ELi1EEvPKvS2_PKiPfj";
        assert_eq!(
            line(|o| kernel(o, &KernelDef::new(1, name, api::CUDA, source::REGISTER))),
            "{\"kernel\":1,\"name\":\"_Z13mul_mat_vec_qIL9ggml_type12ELi1EEvPKvS2_PKiPfj\",\"api\":\"cuda\",\"source\":\"register\"}\n"
        );
        let w = Window {
            t0: 1254000000000,
            t1: 1254050012000,
            counts: &[(1, 264), (2, 22)],
            errors: &[(2, 1)],
            graph: &[(1, 240)],
            captured: &[(1, 12)],
            shapes: &[
                ShapeCount { kernel: 1, grid: [8, 1, 1], block: [32, 4, 1], count: 264 },
                ShapeCount { kernel: 2, grid: [1, 1, 1], block: [256, 1, 1], count: 22 },
            ],
            other_shapes: &[(3, 5)],
            graph_launches: 20,
            unknown_graph_launches: 1,
            expired_captures: 1,
            ..Window::default()
        };
        assert_eq!(
            line(|o| window(o, &w)),
            "{\"window\":[1254000000000,1254050012000],\"counts\":[[1,264],[2,22]],\"errors\":[[2,1]],\
             \"graph\":[[1,240]],\"captured\":[[1,12]],\"shapes\":[[1,[8,1,1],[32,4,1],264],[2,[1,1,1],[256,1,1],22]],\
             \"other_shapes\":[[3,5]],\"graph_launches\":20,\"unknown_graph_launches\":1,\"expired_captures\":1}\n"
        );
        assert_eq!(line(|o| end(o, 1254093000000)), "{\"end_ns\":1254093000000,\"reason\":\"exit\"}\n");
        assert_eq!(
            line(|o| truncated_budget(o, 1254093000000, 1073741300, 1073741824)),
            "{\"truncated\":\"budget\",\"at_ns\":1254093000000,\"bytes\":1073741300,\"max_bytes\":1073741824}\n"
        );
    }

    #[test]
    fn the_header_keeps_at_most_4_kib_of_arguments() {
        let long: Vec<u8> = std::iter::repeat_n(b"x".repeat(1000), 10)
            .flat_map(|mut a| {
                a.push(0);
                a
            })
            .collect();
        let h = Header {
            cmdline: &long,
            ..Header {
                pid: 1,
                ppid: 0,
                exe: b"",
                cmdline: b"",
                start_ns: 0,
                interval_ms: 0,
                shape_buckets: 8,
                max_kernels: 1,
                max_bytes: 0,
                observer: "",
                writer: "w",
            }
        };
        let text = line(|o| header(o, &h));
        assert_eq!(text.matches(&"x".repeat(1000)).count(), 4);
        assert!(text.ends_with(",\"writer\":\"w\"}\n"));
    }

    #[test]
    fn a_crash_record_lists_threads_and_their_launches() {
        let launches = [
            CrashLaunch { kernel: 1, window_t0: 100, grid: [1, 1, 1], block: [64, 1, 1], failed: true },
            CrashLaunch { kernel: 2, window_t0: 150, grid: [2, 1, 1], block: [32, 1, 1], failed: false },
        ];
        let threads = [
            CrashThread { tid: 7, in_flight: Some("hipLaunchKernel"), launches: &launches },
            CrashThread { tid: 8, in_flight: None, launches: &[] },
        ];
        let c = Crash {
            seq: 1,
            signal: 11,
            code: 1,
            addr: 0,
            sender_pid: None,
            at_ns: 200,
            tid: 7,
            flushed: true,
            threads: &threads,
        };
        assert_eq!(
            line(|o| crash(o, &c)),
            "{\"crash\":11,\"signal\":\"SIGSEGV\",\"code\":1,\"addr\":0,\"at_ns\":200,\"seq\":1,\"tid\":7,\"flushed\":true,\
             \"threads\":[{\"tid\":7,\"in_flight\":\"hipLaunchKernel\",\"launches\":[[1,100,[1,1,1],[64,1,1],1],\
             [2,150,[2,1,1],[32,1,1],0]]},{\"tid\":8,\"launches\":[]}]}\n"
        );
        assert_eq!(signal_name(6), "SIGABRT");
    }

    /// The Vulkan layer's crash and device-lost examples of docs/trace-format.md.
    #[test]
    fn vulkan_crash_and_device_lost_records_match_the_documented_examples() {
        let dispatches: Vec<QueueDispatch> = (1..=3)
            .flat_map(|s| {
                [
                    QueueDispatch { kernel: 1, submit: s, grid: [4, 1, 1], count: 1, label: b"" },
                    QueueDispatch { kernel: 2, submit: s, grid: [2, 1, 1], count: 1, label: b"" },
                ]
            })
            .collect();
        let queues = [CrashQueue { queue: 0, device: Some(0), submits: 3, dispatches: &dispatches, omitted: 0 }];
        let threads = [CrashThread { tid: 3302, in_flight: None, launches: &[] }];
        let c = Crash {
            seq: 1,
            signal: 11,
            code: 1,
            addr: 0,
            sender_pid: None,
            at_ns: 9664662022230,
            tid: 3302,
            flushed: true,
            threads: &threads,
        };
        assert_eq!(
            line(|o| crash_with_queues(o, &c, &queues)),
            "{\"crash\":11,\"signal\":\"SIGSEGV\",\"code\":1,\"addr\":0,\"at_ns\":9664662022230,\"seq\":1,\"tid\":3302,\"flushed\":true,\
             \"threads\":[{\"tid\":3302,\"launches\":[]}],\"queues\":[{\"queue\":0,\"device\":0,\"submits\":3,\
             \"dispatches\":[[1,1,[4,1,1],1],[2,1,[2,1,1],1],[1,2,[4,1,1],1],[2,2,[2,1,1],1],[1,3,[4,1,1],1],[2,3,[2,1,1],1]]}]}\n"
        );
        let queues = [CrashQueue { queue: 0, device: Some(0), submits: 3, dispatches: &dispatches[2..], omitted: 0 }];
        let lost = DeviceLost { call: "vkWaitForFences", result: -4, at_ns: 9683944997073, tid: 4567, seq: 1 };
        assert_eq!(
            line(|o| device_lost(o, &lost, &queues)),
            "{\"device_lost\":\"vkWaitForFences\",\"result\":-4,\"at_ns\":9683944997073,\"seq\":1,\"tid\":4567,\
             \"queues\":[{\"queue\":0,\"device\":0,\"submits\":3,\"dispatches\":[[1,2,[4,1,1],1],[2,2,[2,1,1],1],\
             [1,3,[4,1,1],1],[2,3,[2,1,1],1]]}]}\n"
        );
        // Without queues the observer's record is unchanged.
        assert!(!line(|o| crash(o, &c)).contains("queues"));
        // A label follows the count.
        let labelled = [QueueDispatch { label: b"MUL_MAT blk.0.attn_q > mul_mat_vec (2,1,1)", ..dispatches[0] }];
        let queue = [CrashQueue { queue: 1, device: None, submits: 1, dispatches: &labelled, omitted: 0 }];
        assert!(line(|o| device_lost(o, &lost, &queue))
            .contains(r#""dispatches":[[1,1,[4,1,1],1,"MUL_MAT blk.0.attn_q > mul_mat_vec (2,1,1)"]]"#));
        // An omitted count shows; a record of this kind is never taken for a `device` record.
        let with_omitted = [CrashQueue { omitted: 2, device: None, ..queues[0] }];
        let text = line(|o| device_lost(o, &lost, &with_omitted));
        assert!(text.contains(",\"omitted\":2}"), "{text}");
        assert_eq!(kind::ALL.iter().find(|k| text.contains(&format!("{{\"{k}\":"))), Some(&kind::DEVICE_LOST));
    }
}
