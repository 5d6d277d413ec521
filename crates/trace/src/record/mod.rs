//! The records of a trace file and their writers: one function per record kind, so that every
//! observer writes the same keys (`docs/trace-format.md` documents each). A record is one JSON
//! object on one line; its kind is the first key of [`kind::ALL`] it contains.
//!
//! The writers take plain values and write into any [`Out`]; none allocates, so the crash path can
//! use them from a signal handler with a [`crate::json::FixedBuf`].

use crate::json::{Arr, Obj, Out};

mod crash;
mod keys;

pub use crash::*;
pub use keys::*;

/// The first record of every file.
#[derive(Clone, Copy, Debug, Default)]
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
    /// The distinct dispatch sequences the writer keeps (the Vulkan layer's order record); 0, left out: it records
    /// no order.
    pub max_sequences: u32,
    /// The segment of a rotating trace this file is (version 4); `None` for a trace that does not rotate, whose
    /// header is the version 3 one.
    pub segment: Option<Segment<'a>>,
}

/// Where a file stands in a rotating trace (`BACKSCOPE_TRACE_ROTATE`, version 4).
#[derive(Clone, Copy, Debug, Default)]
pub struct Segment<'a> {
    /// From 0, in the order the segments were written.
    pub index: u32,
    /// Segments kept on disk: writing segment k deletes segment k - keep.
    pub keep: u32,
    /// One segment's byte budget.
    pub max_bytes: u64,
    /// The file name (no directory) of segment `index - 1`; empty for segment 0.
    pub previous: &'a [u8],
}

pub fn header(out: &mut (impl Out + ?Sized), h: &Header<'_>) {
    let mut o = Obj::begin(out);
    let version = if h.segment.is_some() { crate::ROTATING_VERSION } else { crate::VERSION };
    o.str(kind::HEADER, crate::FORMAT).u64(field::VERSION, version.into());
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
    if let Some(segment) = h.segment {
        o.u64(field::SEGMENT, segment.index.into()).u64(field::SEGMENTS_KEPT, segment.keep.into());
        o.u64(field::SEGMENT_MAX_BYTES, segment.max_bytes);
        if !segment.previous.is_empty() {
            o.bytes(field::PREVIOUS, segment.previous);
        }
    }
    o.u64_nonzero(field::MAX_SEQUENCES, h.max_sequences.into());
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
        o.list(field::STATS, k.stats, |out, stat| {
            let mut s = Obj::begin(out);
            s.str(field::EXECUTABLE, stat.executable).str(field::NAME, stat.name).f64(field::VALUE, stat.value);
            s.end();
        });
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
    /// Vulkan: submitted command buffers per dispatch sequence ([`sequence`]; 0: one whose order was not kept).
    pub sequences: &'a [(u32, u64)],
}

pub fn window(out: &mut (impl Out + ?Sized), w: &Window<'_>) {
    let mut o = Obj::begin(out);
    Arr::begin(o.key(kind::WINDOW)).u64(w.t0).u64(w.t1).end();
    o.pairs(field::COUNTS, w.counts).pairs(field::ERRORS, w.errors);
    o.pairs(field::GRAPH, w.graph).pairs(field::CAPTURED, w.captured);
    if !w.shapes.is_empty() {
        o.list(field::SHAPES, w.shapes, |out, s| {
            Arr::begin(out).u64(s.kernel.into()).u32x3(s.grid).u32x3(s.block).u64(s.count).end()
        });
    }
    o.pairs(field::OTHER_SHAPES, w.other_shapes);
    o.u64_nonzero(field::GRAPH_LAUNCHES, w.graph_launches);
    o.u64_nonzero(field::UNKNOWN_GRAPH_LAUNCHES, w.unknown_graph_launches);
    o.u64_nonzero(field::UNATTRIBUTED_CAPTURES, w.unattributed_captures);
    o.u64_nonzero(field::EXPIRED_CAPTURES, w.expired_captures);
    o.u64_nonzero(field::SUBMITS, w.submits);
    o.pairs(field::SEQUENCES, w.sequences);
    o.end_line();
}

/// A Vulkan dispatch sequence: the pipelines one submitted command buffer dispatched, in order, as runs of
/// `(kernel id, dispatches in a row)`. Written once, before any window that counts it.
#[derive(Clone, Copy, Debug)]
pub struct Sequence<'a> {
    /// From 1, in order of first submission; 0 is no sequence (submissions whose order was not kept).
    pub id: u32,
    /// When it was first submitted.
    pub first_ns: u64,
    pub runs: &'a [(u32, u32)],
}

pub fn sequence(out: &mut (impl Out + ?Sized), s: &Sequence<'_>) {
    let mut o = Obj::begin(out);
    o.u64(kind::SEQUENCE, s.id.into()).u64(field::FIRST_NS, s.first_ns);
    o.list(field::RUNS, s.runs, |out, &(kernel, n)| Arr::begin(out).u64(kernel.into()).u64(n.into()).end());
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

/// The last record of a segment of a rotating trace whose budget was reached (version 4): the trace goes on in
/// the file named `next` (a file name, no directory); `bytes` is this file's size before the record.
pub fn rotated(out: &mut (impl Out + ?Sized), next: &[u8], at_ns: u64, bytes: u64) {
    let mut o = Obj::begin(out);
    o.bytes(kind::ROTATED, next).u64(field::AT_NS, at_ns).u64(field::BYTES, bytes);
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
    /// The device answered from a profile (`BACKSCOPE_VK_IMPERSONATE`): the facts above are the profile's.
    pub impersonated: Option<Impersonated<'a>>,
}

/// A device the layer made answer as another (`backscope trace --impersonate`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Impersonated<'a> {
    /// The profile's `id` and `source`.
    pub profile: &'a [u8],
    pub profile_source: &'a [u8],
    /// The device that ran the work: its name and driver.
    pub real_name: &'a [u8],
    pub real_driver: &'a [u8],
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
    if let Some(i) = d.impersonated {
        let inner = o.key(field::IMPERSONATED);
        let mut f = Obj::begin(&mut *inner);
        f.bytes(field::PROFILE, i.profile).bytes(field::PROFILE_SOURCE, i.profile_source);
        f.bytes(field::REAL_NAME, i.real_name).bytes(field::REAL_DRIVER, i.real_driver);
        f.end();
    }
    o.end_line();
}

#[cfg(test)]
mod tests;
