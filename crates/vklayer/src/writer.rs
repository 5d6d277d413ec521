//! The trace writer: turns the pipelines' counters into windows of the backscope trace format
//! (`docs/trace-format.md`), on its own thread every `BACKSCOPE_TRACE_INTERVAL_MS` and once at exit
//! (a `.fini_array` destructor). Never on a hook's path.
//!
//! Each flush writes the `device` records of devices created since the last one, the definitions of
//! the pipelines counted for the first time, then one window line with the deltas since the last
//! flush. The file is created at the first flush that has something to say (a device), so processes
//! that never create a Vulkan device leave no file. The file's edges (names, budget, `truncated`
//! record, the segments of a rotating trace) are `format::sink`'s.

use std::sync::atomic::{AtomicU64, Ordering};

use format::clock::now_ns;
use format::record::{self, api, ShapeCount};
use format::sink::{Stop, TraceSink};
use format::spirv;
use format::writer::{Flush, ShapeDeltas, StopReport, TraceOut, TraceWriter, WriterLoop};

use crate::pipelines::{self, DeviceFacts, Meta, ShapeCounts, OVERFLOW, SHAPE_BUCKETS};
use crate::{order, state};
use format::spin::SpinLock;

/// `vkQueueSubmit*` calls that carried dispatches.
pub static SUBMITS: AtomicU64 = AtomicU64::new(0);

/// Device-lost records written per process (a program that retries after a lost device must not
/// fill the disk).
pub const MAX_DEVICE_LOST_RECORDS: u32 = 8;

/// Hang records written per process (one per stall; a program that stalls again and again must not fill the disk).
pub const MAX_HANG_RECORDS: u32 = 8;

struct Writer {
    out: TraceOut,
    /// Per slot: dispatches and errors at the last flush.
    last: Vec<[u64; 2]>,
    last_shapes: ShapeDeltas<[u32; 3], SHAPE_BUCKETS>,
    last_submits: u64,
    last_t: u64,
    overflow_defined: bool,
    /// Dispatch sequences whose `sequence` record is written (ids 1 to this).
    sequences_written: u32,
    /// Per sequence id: submissions at the last flush.
    last_sequences: Vec<u64>,
    /// The `sequence_table_full` warning is written.
    sequences_full_said: bool,
    /// Device-lost records written.
    device_lost: u32,
    /// Hang records written.
    hangs: u32,
}

static WRITER: SpinLock<Option<Writer>> = SpinLock::new(None);

impl TraceWriter for Writer {
    fn new() -> Writer {
        Writer {
            out: TraceOut::new(),
            last: Vec::new(),
            last_shapes: ShapeDeltas::new(),
            last_submits: 0,
            last_t: state::start_ns(),
            overflow_defined: false,
            sequences_written: 0,
            last_sequences: Vec::new(),
            sequences_full_said: false,
            device_lost: 0,
            hangs: 0,
        }
    }

    fn out(&mut self) -> &mut TraceOut {
        &mut self.out
    }
}

impl Writer {
    fn open(&mut self) -> std::io::Result<()> {
        let settings = state::settings().ok_or_else(|| std::io::Error::other("no configuration"))?;
        let mut sink =
            TraceSink::create_rotating(&settings.destination, self.out.pid(), settings.max_bytes, settings.rotate)?;
        // Kept by a rotating trace for its later segments' headers.
        sink.write_header_with(format::sink::process_header(record::Header {
            pid: self.out.pid(),
            start_ns: state::start_ns(),
            interval_ms: settings.interval_ms,
            shape_buckets: SHAPE_BUCKETS as u32,
            max_kernels: settings.max_kernels.min(pipelines::HARD_MAX_SLOTS),
            max_bytes: settings.max_bytes,
            observer: env!("CARGO_PKG_VERSION"),
            writer: format::vulkan::WRITER_NAME,
            max_sequences: if order::recording() { order::MAX_SEQUENCES } else { 0 },
            ..record::Header::default()
        }))?;
        format::crash::file_opened(std::os::fd::AsRawFd::as_raw_fd(&sink), sink.budget());
        format::crash::flushed(sink.written());
        self.out.sink = Some(sink);
        Ok(())
    }

    fn flush(&mut self, kind: Flush) -> Result<(), Stop> {
        // Sequences before the pipelines' counts: a submission counts its dispatches before its sequence, so every
        // sequence counted here has its dispatches in the counts read below (or in an earlier window).
        let (new_sequences, sequences) = self.sequence_deltas();
        // Submissions of a recording seen before count as repeats on their command buffer (`crate::commands`):
        // folded into the counters now, after the sequences were read, so that every sequence counted in this
        // window still has its dispatches in the counts read below.
        crate::commands::fold_all();
        // Deltas first: they say which definitions this flush must write.
        let count = pipelines::slot_count() as usize;
        if self.last.len() < count {
            self.last.resize(count, [0; 2]);
        }
        let mut counts = Vec::new();
        let mut errors = Vec::new();
        let mut shapes = Vec::new();
        let mut other_shapes = Vec::new();
        for id in 0..count as u32 {
            let Some(c) = pipelines::counters(id) else { continue };
            // The dispatches are the sum of the shape counts, from the same reading, so a window's
            // count and its shapes always agree.
            let shape_counts = c.shape_counts();
            let dispatches = shape_counts.dispatches();
            let now = [dispatches, c.errors.load(Ordering::Relaxed)];
            let before = self.last[id as usize];
            if dispatches != before[0] {
                counts.push((id, dispatches - before[0]));
                self.shape_deltas(id, &shape_counts, c.local_size(), &mut shapes, &mut other_shapes);
            }
            if now[1] != before[1] {
                errors.push((id, now[1] - before[1]));
            }
            self.last[id as usize] = now;
        }
        let mut wanted: Vec<u32> = counts.iter().chain(&errors).map(|&(id, _)| id).collect();
        // A sequence names its pipelines: they are defined before it.
        wanted.extend(new_sequences.iter().flat_map(|s| s.runs).map(|&(slot, _)| slot));
        wanted.sort_unstable();
        wanted.dedup();
        let taken = pipelines::take_for_writer(&wanted, kind == Flush::Exit);
        let submits = SUBMITS.load(Ordering::Relaxed);
        if self.out.sink.is_none() {
            if taken.devices.is_empty() && taken.definitions.is_empty() && counts.is_empty() && new_sequences.is_empty()
            {
                return Ok(());
            }
            self.open()?;
        }
        for d in &taken.devices {
            device_record(&mut self.out.buf, d);
        }
        for (id, meta) in &taken.definitions {
            definition(&mut self.out.buf, *id, meta);
        }
        if !self.overflow_defined && wanted.contains(&OVERFLOW) {
            self.overflow_defined = true;
            record::kernel(
                &mut self.out.buf,
                &record::KernelDef::new(OVERFLOW, b"(overflow)", api::OVERFLOW, record::source::NONE),
            );
            let detail = if pipelines::overflowed() {
                format!(
                    "more than {} distinct pipelines ({}), or dispatches that did not fit a command buffer's record; \
                     they are counted as kernel 0",
                    state::settings().map_or(0, |s| s.max_kernels),
                    format::env::MAX_KERNELS
                )
            } else {
                "dispatches with no known compute pipeline bound, or that did not fit a command buffer's record; \
                 they are counted as kernel 0"
                    .to_string()
            };
            record::warning_record(&mut self.out.buf, record::warning::KERNEL_TABLE_FULL, &detail);
        }
        for s in &new_sequences {
            record::sequence(&mut self.out.buf, s);
        }
        if !self.sequences_full_said && order::full() {
            self.sequences_full_said = true;
            let detail = format!(
                "more than {} distinct dispatch sequences, or more than {} runs of pipelines in all; submissions of \
                 further ones count as sequence 0",
                order::MAX_SEQUENCES,
                order::MAX_TOTAL_RUNS
            );
            record::warning_record(&mut self.out.buf, record::warning::SEQUENCE_TABLE_FULL, &detail);
        }
        let t0 = self.last_t;
        let t1 = now_ns().max(t0);
        self.last_t = t1;
        let window_submits = submits.wrapping_sub(self.last_submits);
        self.last_submits = submits;
        if !counts.is_empty() || !errors.is_empty() || !sequences.is_empty() {
            let window = record::Window {
                t0,
                t1,
                counts: &counts,
                errors: &errors,
                shapes: &shapes,
                other_shapes: &other_shapes,
                submits: window_submits,
                sequences: &sequences,
                ..Default::default()
            };
            record::window(&mut self.out.buf, &window);
        }
        // The program's handler returned from a crash record's signal and the process outlived it (a Go panic that
        // was recovered): say so, as the CUDA/HIP observer does, so that a reader does not take the crash as fatal.
        // Taken even without a file, so that the writer thread stops waking up for it.
        if let Some((seq, at_ns)) = format::crash::survived_signal() {
            if self.out.sink.is_some() {
                record::signal_returned(&mut self.out.buf, seq, at_ns);
            }
        }
        if kind == Flush::Exit {
            // Nothing may follow the end record: the crash handler stops first.
            format::crash::finish_exclusive();
            record::end(&mut self.out.buf, now_ns());
        }
        let result = self.out.write_out();
        if result.is_ok() {
            // The crash handler may name these kernels from now on.
            taken.definitions.iter().for_each(|(id, _)| pipelines::mark_defined(*id));
            if self.overflow_defined {
                pipelines::mark_defined(OVERFLOW);
            }
        }
        result
    }

    /// The sequences kept since the last flush (their records are written in this one, so they count as written), and
    /// the submissions per sequence since then (`[id, n]`, 0 for those whose order was not kept).
    fn sequence_deltas(&mut self) -> (Vec<record::Sequence<'static>>, Vec<(u32, u64)>) {
        let kept = order::kept_count();
        let new: Vec<record::Sequence<'static>> = (self.sequences_written + 1..=kept)
            .filter_map(|id| order::sequence(id).map(|(runs, first_ns)| record::Sequence { id, first_ns, runs }))
            .collect();
        self.sequences_written = kept;
        if self.last_sequences.len() <= kept as usize {
            self.last_sequences.resize(kept as usize + 1, 0);
        }
        let mut deltas = Vec::new();
        for (id, last) in self.last_sequences.iter_mut().enumerate() {
            let now = order::submissions(id as u32);
            if now != *last {
                deltas.push((id as u32, now.wrapping_sub(*last)));
                *last = now;
            }
        }
        (new, deltas)
    }

    /// After a window flush: the `device_lost` record, naming the queues' last dispatches.
    fn device_lost(&mut self, call: &str, result: i32) -> Result<(), Stop> {
        if self.out.sink.is_none() || self.device_lost >= MAX_DEVICE_LOST_RECORDS {
            return Ok(());
        }
        self.device_lost += 1;
        let at_ns = now_ns();
        // The drivers' own account of the loss, asked now that a call returned it (VK_EXT_device_fault).
        let answers = crate::fault::ask_all();
        crate::fault::with_records(&answers, |faults| {
            let lost =
                record::DeviceLost { call, result, at_ns, tid: crate::locus::gettid(), seq: self.device_lost, faults };
            with_queues(|queues| record::device_lost(&mut self.out.buf, &lost, queues));
        });
        self.out.write_out()
    }

    /// After a window flush: the hang watcher's `hang` record.
    fn hang(&mut self, stalled_ms: u64) -> Result<(), Stop> {
        if self.out.sink.is_none() || self.hangs >= MAX_HANG_RECORDS {
            return Ok(());
        }
        self.hangs += 1;
        let hang = record::Hang { stalled_ms, at_ns: now_ns(), seq: self.hangs };
        with_queues(|queues| record::hang(&mut self.out.buf, &hang, queues));
        self.out.write_out()
    }

    fn shape_deltas(
        &mut self,
        id: u32,
        counts: &ShapeCounts,
        block: [u32; 3],
        shapes: &mut Vec<ShapeCount>,
        other: &mut Vec<(u32, u64)>,
    ) {
        let grown = self.last_shapes.take(id, &counts.entries, counts.other, |grid, count| {
            shapes.push(ShapeCount { kernel: id, grid, block, count })
        });
        if let Some(n) = grown {
            other.push((id, n));
        }
    }
}

/// Calls `f` with every queue's last dispatches and progress, read now (off the signal path: the buffers are
/// allocated here).
fn with_queues(f: impl FnOnce(&[record::CrashQueue<'_>])) {
    use crate::locus::{LABEL_BYTES, QUEUES, RING_DISPATCHES};
    let mut dispatches = Box::new([[record::QueueDispatch::default(); RING_DISPATCHES]; QUEUES]);
    let mut texts = Box::new([[[0; LABEL_BYTES]; RING_DISPATCHES]; QUEUES]);
    let mut in_flight = Box::new([[record::InFlightDispatch::default(); crate::progress::MAX_IN_FLIGHT]; QUEUES]);
    let mut queues = [None; QUEUES];
    let n = crate::crash::read_queues(&mut dispatches, &mut texts, &mut in_flight, &mut queues);
    let queues: Vec<record::CrashQueue<'_>> = queues.iter().take(n).flatten().copied().collect();
    f(&queues)
}

fn device_record(out: &mut Vec<u8>, d: &DeviceFacts) {
    record::device(
        out,
        &record::Device {
            id: d.id,
            api: api::VULKAN,
            name: &d.name,
            driver: &d.driver,
            driver_info: &d.driver_info,
            driver_version: d.driver_version,
            api_version: d.api_version,
            vendor_id: d.vendor_id,
            device_id: d.device_id,
            device_type: d.device_type,
            subgroup_size: d.subgroup_size,
            subgroup_size_min: d.subgroup_size_min,
            subgroup_size_max: d.subgroup_size_max,
            integer_dot: d.integer_dot,
            cooperative_matrix: d.cooperative_matrix,
            shader_core_count: Some(d.shader_core_count),
            flags: &d.flags,
            impersonated: d.impersonated.as_ref().map(|i| record::Impersonated {
                profile: &i.profile,
                profile_source: &i.profile_source,
                real_name: &i.real_name,
                real_driver: &i.real_driver,
            }),
        },
    );
}

fn definition(out: &mut Vec<u8>, id: u32, meta: &Meta) {
    let hash = spirv::hex(meta.spirv_hash);
    let hash = std::str::from_utf8(&hash).unwrap_or_default();
    let stats: Vec<record::PipelineStat<'_>> = meta
        .stats
        .iter()
        .map(|s| record::PipelineStat { executable: &s.executable, name: &s.name, value: s.value })
        .collect();
    record::kernel(
        out,
        &record::KernelDef {
            device: meta.device,
            spirv_hash: Some(hash),
            local_size: meta.local_size,
            spirv_object: meta.spirv_object.as_deref(),
            stats: &stats,
            ..record::KernelDef::new(id, &meta.name, api::VULKAN, meta.source)
        },
    );
}

/// Flushes; false once the writer is finished.
fn flush(kind: Flush) -> bool {
    flush_then(kind, After::Nothing)
}

/// A record written after the window flush.
enum After<'a> {
    Nothing,
    DeviceLost(&'a str, i32),
    Hang(u64),
}

/// A Vulkan call returned `VK_ERROR_DEVICE_LOST` (`result`): writes the open window, then a
/// `device_lost` record naming each queue's last submitted dispatches. On the application's thread,
/// outside any signal handler: it may lock and allocate like any flush.
pub fn device_lost(call: &str, result: i32) {
    if state::on() {
        state::guarded(|| flush_then(Flush::Window, After::DeviceLost(call, result)));
    }
}

/// The hang watcher saw no GPU progress for `stalled_ms` while work was pending: writes the open window, then a
/// `hang` record with each queue's progress.
pub fn hang(stalled_ms: u64) {
    if state::on() {
        state::guarded(|| flush_then(Flush::Window, After::Hang(stalled_ms)));
    }
}

fn flush_then(kind: Flush, after: After<'_>) -> bool {
    if kind == Flush::Window {
        // The black box's submission progress, fresh for a crash record the handler writes after this flush.
        if let Some(refresh) = BEFORE_WINDOW.get() {
            refresh();
        }
    }
    format::writer::flush_locked(&WRITER, kind, &STOPPED, |writer| {
        writer.flush(kind).and_then(|()| match after {
            After::DeviceLost(call, result) => writer.device_lost(call, result),
            After::Hang(stalled_ms) => writer.hang(stalled_ms),
            After::Nothing => Ok(()),
        })
    })
}

/// How the layer says that its trace stopped before the process.
const STOPPED: StopReport = StopReport {
    budget: || state::settings().map_or((0, 0), |s| (s.max_bytes, s.rotate)),
    note: state::note,
    disable: state::disable,
    disabled: "not observing",
};

/// Starts the writer thread: a window every `interval_ms` (none when 0), and one whenever the crash handler asks
/// for the open window. `before_window` runs before each window is written (the black box reads its semaphores
/// there); it is passed in so that the writer, which every hook reaches, imports none of them.
pub fn spawn_thread(interval_ms: u64, before_window: fn()) {
    let _ = BEFORE_WINDOW.set(before_window);
    let what = WriterLoop { interval_ms, on_start: || {}, running: state::on, flush: flush_window };
    if !format::writer::spawn("backscope-vk", what) {
        state::note(format_args!("could not start the writer thread; the trace will be written at exit only"));
    }
}

static BEFORE_WINDOW: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

fn flush_window(_periodic: bool) -> bool {
    state::guarded(|| flush(Flush::Window)) == Some(true)
}

/// In a forked child (one thread): the parent's writer state is not the child's; a lock a parent
/// thread held is abandoned with it.
pub const FORK: format::fork::ForkHandlers = format::fork::ForkHandlers::child(forget_in_child);

fn forget_in_child() {
    WRITER.release_for_fork();
    let mut guard = WRITER.lock();
    if let Some(old) = guard.take() {
        // A parent thread may have been inside it at the fork: leaked, not dropped.
        std::mem::forget(old);
    }
}

format::flush_at_exit!(state::on, || flush(Flush::Exit));
