//! The keys of the format: what gives a record its kind, field names, and the values of enumerated fields.

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
    /// Version 3 (added later): the Vulkan layer's hang watcher saw pending GPU work make no progress.
    pub const HANG: &str = "hang_ms";
    /// Version 4: the last record of a segment of a rotating trace (`BACKSCOPE_TRACE_ROTATE`), naming the next
    /// segment's file.
    pub const ROTATED: &str = "rotated";
    /// Versions 3 and 4 (added later): a Vulkan dispatch sequence, the pipelines one submitted command buffer dispatched,
    /// in order (defined once; windows count its submissions).
    pub const SEQUENCE: &str = "sequence";
    pub const ALL: [&str; 13] = [
        HEADER,
        KERNEL,
        WINDOW,
        WARNING,
        END,
        TRUNCATED,
        ROTATED,
        CRASH,
        SIGNAL_RETURNED,
        DEVICE_LOST,
        HANG,
        SEQUENCE,
        DEVICE,
    ];
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
    /// The Vulkan layer kept as many dispatch sequences as it keeps; submissions of further ones count as sequence 0.
    pub const SEQUENCE_TABLE_FULL: &str = "sequence_table_full";
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
    /// Version 4: a rotating trace's header (`BACKSCOPE_TRACE_ROTATE`): the segment's number (from 0), how many
    /// segments are kept, each one's budget, and the file name of the segment before it.
    pub const SEGMENT: &str = "segment";
    pub const SEGMENTS_KEPT: &str = "segments_kept";
    pub const SEGMENT_MAX_BYTES: &str = "segment_max_bytes";
    pub const PREVIOUS: &str = "previous";
    /// Versions 3 and 4 (added later): the distinct dispatch sequences the Vulkan layer keeps; absent when it records none.
    pub const MAX_SEQUENCES: &str = "max_sequences";

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
    /// Versions 3 and 4 (added later): submitted command buffers per dispatch sequence, `[[sequence, n], …]`.
    pub const SEQUENCES: &str = "sequences";
    /// A `sequence` record's pipelines in dispatch order, `[[kernel, dispatches in a row], …]`.
    pub const RUNS: &str = "runs";
    /// When a `sequence` was first submitted.
    pub const FIRST_NS: &str = "first_ns";

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
    /// Version 3 (black box): a queue's `progress` object and its fields.
    pub const PROGRESS: &str = "progress";
    pub const BY: &str = "by";
    pub const COMPLETED: &str = "completed";
    pub const PENDING: &str = "pending";
    pub const MORE_IN_FLIGHT: &str = "more_in_flight";
    pub const UNCONFIRMED: &str = "unconfirmed";
    pub const NOT_STARTED: &str = "not_started";
    pub const RESULT: &str = "result";
    /// A `device_lost` record's `faults` (`VK_EXT_device_fault`) and their fields.
    pub const FAULTS: &str = "faults";
    pub const DESCRIPTION: &str = "description";
    pub const ADDRESSES: &str = "addresses";
    pub const VENDOR: &str = "vendor";
    pub const VENDOR_BINARY_BYTES: &str = "vendor_binary_bytes";

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
    pub const IMPERSONATED: &str = "impersonated";
    pub const PROFILE: &str = "profile";
    pub const PROFILE_SOURCE: &str = "profile_source";
    pub const REAL_NAME: &str = "real_name";
    pub const REAL_DRIVER: &str = "real_driver";
}

/// `/proc/self/cmdline` bytes kept in the header: enough to tell processes apart (`ollama runner
/// --model …`), bounded for huge command lines.
pub const CMDLINE_MAX_BYTES: usize = 4096;
