//! The trace writer: turns the pipelines' counters into windows of the backscope trace format
//! (`docs/trace-format.md`), on its own thread every `BACKSCOPE_TRACE_INTERVAL_MS` and once at exit
//! (a `.fini_array` destructor). Never on a hook's path.
//!
//! Each flush writes the `device` records of devices created since the last one, the definitions of
//! the pipelines counted for the first time, then one window line with the deltas since the last
//! flush. The file is created at the first flush that has something to say (a device), so processes
//! that never create a Vulkan device leave no file. The file's edges (names, budget, `truncated`
//! record) are `format::sink`'s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use format::clock::now_ns;
use format::record::{self, api, ShapeCount};
use format::sink::{CoWriter, Stop, TraceSink};
use format::spirv;

use crate::pipelines::{self, DeviceFacts, Meta, ShapeCounts, OVERFLOW, SHAPE_BUCKETS};
use crate::state;
use format::spin::SpinLock;

/// `vkQueueSubmit*` calls that carried dispatches.
pub static SUBMITS: AtomicU64 = AtomicU64::new(0);

/// Device-lost records written per process (a program that retries after a lost device must not
/// fill the disk).
pub const MAX_DEVICE_LOST_RECORDS: u32 = 8;

/// The crash handler writes into the trace file too (`crate::crash`).
struct CrashHandler;

impl CoWriter for CrashHandler {
    fn written(&self) -> u64 {
        crate::crash::extra_written()
    }
    fn finish(&self) {
        crate::crash::finish_exclusive();
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flush {
    Window,
    Exit,
}

struct Writer {
    pid: u32,
    sink: Option<TraceSink>,
    /// No more output: the exit flush was written, the budget is spent, or writing failed.
    done: bool,
    /// Per slot: dispatches and errors at the last flush.
    last: Vec<[u64; 2]>,
    last_shapes: HashMap<u32, ([u64; SHAPE_BUCKETS], u64)>,
    last_submits: u64,
    last_t: u64,
    overflow_defined: bool,
    /// Device-lost records written.
    device_lost: u32,
    buf: Vec<u8>,
}

static WRITER: SpinLock<Option<Writer>> = SpinLock::new(None);

impl Writer {
    fn new() -> Writer {
        Writer {
            pid: std::process::id(),
            sink: None,
            done: false,
            last: Vec::new(),
            last_shapes: HashMap::new(),
            last_submits: 0,
            last_t: state::start_ns(),
            overflow_defined: false,
            device_lost: 0,
            buf: Vec::with_capacity(64 * 1024),
        }
    }

    fn open(&mut self) -> std::io::Result<()> {
        let settings = state::settings().ok_or_else(|| std::io::Error::other("no configuration"))?;
        let mut sink = TraceSink::create(&settings.destination, self.pid, settings.max_bytes)?;
        let exe =
            std::fs::read_link("/proc/self/exe").map(|p| p.into_os_string().into_encoded_bytes()).unwrap_or_default();
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
        let mut header = Vec::new();
        record::header(
            &mut header,
            &record::Header {
                pid: self.pid,
                // SAFETY: getppid has no preconditions.
                ppid: unsafe { libc::getppid() } as u32,
                exe: &exe,
                cmdline: &cmdline,
                start_ns: state::start_ns(),
                interval_ms: settings.interval_ms,
                shape_buckets: SHAPE_BUCKETS as u32,
                max_kernels: settings.max_kernels.min(pipelines::HARD_MAX_SLOTS),
                max_bytes: settings.max_bytes,
                observer: env!("CARGO_PKG_VERSION"),
                writer: format::vulkan::WRITER_NAME,
            },
        );
        sink.write_header(&header)?;
        crate::crash::file_opened(std::os::fd::AsRawFd::as_raw_fd(&sink), settings.max_bytes);
        crate::crash::flushed(sink.written());
        self.sink = Some(sink);
        Ok(())
    }

    fn flush(&mut self, kind: Flush) -> Result<(), Stop> {
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
        let wanted: Vec<u32> = counts.iter().chain(&errors).map(|&(id, _)| id).collect();
        let taken = pipelines::take_for_writer(&wanted, kind == Flush::Exit);
        let submits = SUBMITS.load(Ordering::Relaxed);
        if self.sink.is_none() {
            if taken.devices.is_empty() && taken.definitions.is_empty() && counts.is_empty() {
                return Ok(());
            }
            self.open()?;
        }
        for d in &taken.devices {
            device_record(&mut self.buf, d);
        }
        for (id, meta) in &taken.definitions {
            definition(&mut self.buf, *id, meta);
        }
        if !self.overflow_defined && wanted.contains(&OVERFLOW) {
            self.overflow_defined = true;
            record::kernel(
                &mut self.buf,
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
            record::warning_record(&mut self.buf, record::warning::KERNEL_TABLE_FULL, &detail);
        }
        let t0 = self.last_t;
        let t1 = now_ns().max(t0);
        self.last_t = t1;
        let window_submits = submits.wrapping_sub(self.last_submits);
        self.last_submits = submits;
        if !counts.is_empty() || !errors.is_empty() {
            let window = record::Window {
                t0,
                t1,
                counts: &counts,
                errors: &errors,
                shapes: &shapes,
                other_shapes: &other_shapes,
                submits: window_submits,
                ..Default::default()
            };
            record::window(&mut self.buf, &window);
        }
        if kind == Flush::Exit {
            // Nothing may follow the end record: the crash handler stops first.
            crate::crash::finish_exclusive();
            record::end(&mut self.buf, now_ns());
        }
        let result = self.write_buf();
        if result.is_ok() {
            // The crash handler may name these kernels from now on.
            taken.definitions.iter().for_each(|(id, _)| pipelines::mark_defined(*id));
            if self.overflow_defined {
                pipelines::mark_defined(OVERFLOW);
            }
        }
        result
    }

    /// Writes the lines in `buf` (beside the crash handler) and empties it.
    fn write_buf(&mut self) -> Result<(), Stop> {
        let lines = std::mem::take(&mut self.buf);
        let result = match self.sink.as_mut() {
            Some(sink) if !lines.is_empty() => {
                let result = sink.write_lines_beside(&lines, &CrashHandler);
                crate::crash::flushed(sink.written());
                result
            }
            _ => Ok(()),
        };
        self.buf = lines;
        self.buf.clear();
        result
    }

    /// After a window flush: the `device_lost` record, naming the queues' last dispatches.
    fn device_lost(&mut self, call: &str, result: i32) -> Result<(), Stop> {
        if self.sink.is_none() || self.device_lost >= MAX_DEVICE_LOST_RECORDS {
            return Ok(());
        }
        self.device_lost += 1;
        let mut dispatches =
            Box::new([[record::QueueDispatch::default(); crate::locus::RING_DISPATCHES]; crate::locus::QUEUES]);
        let mut texts =
            Box::new([[[0; crate::locus::LABEL_BYTES]; crate::locus::RING_DISPATCHES]; crate::locus::QUEUES]);
        let mut queues = [None; crate::locus::QUEUES];
        let n = crate::crash::read_queues(&mut dispatches, &mut texts, &mut queues);
        let queues: Vec<record::CrashQueue<'_>> = queues.iter().take(n).flatten().copied().collect();
        let lost =
            record::DeviceLost { call, result, at_ns: now_ns(), tid: crate::locus::gettid(), seq: self.device_lost };
        record::device_lost(&mut self.buf, &lost, &queues);
        self.write_buf()
    }

    fn shape_deltas(
        &mut self,
        id: u32,
        counts: &ShapeCounts,
        block: [u32; 3],
        shapes: &mut Vec<ShapeCount>,
        other: &mut Vec<(u32, u64)>,
    ) {
        let (last_entries, last_other) = self.last_shapes.entry(id).or_insert(([0; SHAPE_BUCKETS], 0));
        let mut merged: Vec<([u32; 3], u64)> = Vec::new();
        for (entry, last) in counts.entries.iter().zip(last_entries.iter_mut()) {
            let Some((grid, n)) = *entry else { continue };
            let delta = n.wrapping_sub(*last);
            *last = n;
            if delta == 0 {
                continue;
            }
            // Two threads racing on a new shape can claim two entries for it: merge them.
            match merged.iter_mut().find(|(g, _)| *g == grid) {
                Some((_, m)) => *m += delta,
                None => merged.push((grid, delta)),
            }
        }
        shapes.extend(merged.into_iter().map(|(grid, count)| ShapeCount { kernel: id, grid, block, count }));
        if counts.other != *last_other {
            other.push((id, counts.other.wrapping_sub(*last_other)));
            *last_other = counts.other;
        }
    }
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
    flush_then(kind, None)
}

/// A Vulkan call returned `VK_ERROR_DEVICE_LOST` (`result`): writes the open window, then a
/// `device_lost` record naming each queue's last submitted dispatches. On the application's thread,
/// outside any signal handler: it may lock and allocate like any flush.
pub fn device_lost(call: &str, result: i32) {
    if state::on() {
        state::guarded(|| flush_then(Flush::Window, Some((call, result))));
    }
}

fn flush_then(kind: Flush, lost: Option<(&str, i32)>) -> bool {
    let mut guard = WRITER.lock();
    let writer = guard.get_or_insert_with(Writer::new);
    if writer.done || writer.pid != std::process::id() {
        return false;
    }
    let result = writer.flush(kind).and_then(|()| match lost {
        Some((call, result)) => writer.device_lost(call, result),
        None => Ok(()),
    });
    match result {
        Ok(()) => {
            writer.done = kind == Flush::Exit;
            !writer.done
        }
        Err(Stop::Budget) => {
            writer.done = true;
            writer.sink = None;
            state::note(format_args!(
                "the trace reached its budget of {} bytes (BACKSCOPE_TRACE_MAX_BYTES) and was cut; the program continues",
                state::settings().map_or(0, |s| s.max_bytes)
            ));
            false
        }
        Err(Stop::Failed(e)) => {
            if let Some(sink) = writer.sink.as_mut() {
                sink.record_write_error_beside(&e, &CrashHandler);
            }
            crate::crash::finish_exclusive();
            writer.done = true;
            writer.sink = None;
            state::disable(format_args!("cannot write the trace ({e}); not observing, the program continues"));
            false
        }
    }
}

/// Starts the periodic writer thread (`interval_ms` 0: only the exit flush writes).
pub fn spawn_thread(interval_ms: u64) {
    if interval_ms == 0 {
        return;
    }
    // The thread inherits the creating thread's signal mask: block everything around the spawn so
    // that the program's signal handlers never run on the layer's thread.
    // SAFETY: sigset_t is plain data initialised by sigfillset/pthread_sigmask before use.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers; only this thread's mask changes, and it is restored below.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
    }
    let spawned = std::thread::Builder::new()
        .name("backscope-vk".into())
        .stack_size(256 * 1024)
        .spawn(move || writer_loop(interval_ms));
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) };
    if spawned.is_err() {
        state::note(format_args!("could not start the writer thread; the trace will be written at exit only"));
    }
}

/// Flushes every `interval_ms`, and at once when the crash handler asks (an `eventfd`).
fn writer_loop(interval_ms: u64) {
    // SAFETY: creates a close-on-exec eventfd this thread owns.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd >= 0 {
        crate::crash::writer_thread_started(efd);
    }
    let interval = interval_ms.saturating_mul(1_000_000).max(1);
    let mut next = now_ns().saturating_add(interval);
    loop {
        let now = now_ns();
        if next > now {
            wait(efd, next - now);
        }
        let request = crate::crash::pending_request();
        if now_ns() >= next {
            next = next.saturating_add(interval).max(now_ns().saturating_add(1));
        }
        let running = state::on() && state::guarded(|| flush(Flush::Window)) == Some(true);
        crate::crash::request_served(request);
        if !running {
            break;
        }
    }
    crate::crash::writer_thread_ended();
    if efd >= 0 {
        // SAFETY: the eventfd created above; the handler no longer sees it (writer_thread_ended).
        unsafe { libc::close(efd) };
    }
}

/// Sleeps up to `ns`, or until the crash handler writes to `efd` (whose counter is then reset).
fn wait(efd: i32, ns: u64) {
    if efd < 0 {
        std::thread::sleep(std::time::Duration::from_nanos(ns));
        return;
    }
    let mut fds = libc::pollfd { fd: efd, events: libc::POLLIN, revents: 0 };
    let ms = ns.div_ceil(1_000_000).min(i32::MAX as u64) as i32;
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut fds, 1, ms) } > 0 {
        let mut value = 0u64;
        // SAFETY: an 8-byte read from the eventfd into a u64.
        unsafe { libc::read(efd, (&mut value as *mut u64).cast(), 8) };
    }
}

/// In a forked child (one thread): the parent's writer state is not the child's; a lock a parent
/// thread held is abandoned with it.
pub fn forget_in_child() {
    WRITER.release_for_fork();
    let mut guard = WRITER.lock();
    if let Some(old) = guard.take() {
        // A parent thread may have been inside it at the fork: leaked, not dropped.
        std::mem::forget(old);
    }
}

/// Final flush at process exit.
#[cfg(not(test))]
#[used]
#[link_section = ".fini_array"]
static FLUSH_AT_EXIT: extern "C" fn() = flush_at_exit;

#[cfg_attr(test, allow(dead_code))]
extern "C" fn flush_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if state::on() {
            flush(Flush::Exit);
        }
    });
}
