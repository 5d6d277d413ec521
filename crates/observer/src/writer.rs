//! The trace writer: turns the counters into JSON Lines (format in `docs/trace-format.md`, records
//! written by the format crate's writers).
//!
//! It runs on its own thread every `BACKSCOPE_TRACE_INTERVAL_MS` and once at exit (a `.fini_array`
//! destructor, which runs after the program's `atexit` handlers and destructors), never on a hook's
//! path. Each flush writes the definitions of kernels registered since the last flush, then one
//! window line with what changed since the last flush (deltas), if anything did.
//!
//! The file has a byte budget (`BACKSCOPE_TRACE_MAX_BYTES`): the flush that would pass it writes
//! the whole lines that fit and a `truncated` record, and the trace ends there. A failed write
//! (full disk, file size limit) ends it too; for a regular file the writer cuts the file back to
//! its last whole line, giving up lines from the end until the `truncated` record fits, so that a
//! reader learns why the trace stops instead of taking it for a killed process. With
//! `BACKSCOPE_TRACE_ROTATE` the budget is split into segment files instead, the newest kept. The file's edges
//! (names, budget, `truncated` record, segments) are `format::sink`'s; the crash handler writes into the same
//! file ([`format::crash::Handler`]); the tail of every flush (writing beside it, stopping) is `format::writer`'s.

use std::collections::HashSet;
use std::io;
use std::os::fd::AsRawFd;

use format::clock::now_ns;
use format::fork::ForkHandlers;
use format::record::{self, ShapeCount};
use format::sink::{HeaderWriter, Stop, TraceSink};
use format::writer::{Flush, ShapeDeltas, StopReport, TraceOut, TraceWriter, WriterLoop, WRITE_CHUNK};

use crate::graphs;
use crate::registry::{self, Shape, ShapeCounts, SHAPE_BUCKETS};
use crate::state;
use format::spin::SpinLock;

/// Counter values at the last flush, per slot: launches, errors, graph, captured.
type Counters = [u64; 4];

struct Writer {
    out: TraceOut,
    /// Slots `1..defined` have their definition line written.
    defined: u32,
    overflow_defined: bool,
    last: Vec<Counters>,
    last_shapes: ShapeDeltas<Shape, SHAPE_BUCKETS>,
    last_graph: [u64; 4],
    last_t: u64,
    warned: HashSet<&'static str>,
}

static WRITER: SpinLock<Option<Writer>> = SpinLock::new(None);

impl TraceWriter for Writer {
    fn new() -> Writer {
        Writer {
            out: TraceOut::new(),
            defined: 1,
            overflow_defined: false,
            last: Vec::new(),
            last_shapes: ShapeDeltas::new(),
            last_graph: [0; 4],
            last_t: state::start_ns(),
            warned: HashSet::new(),
        }
    }

    fn out(&mut self) -> &mut TraceOut {
        &mut self.out
    }
}

impl Writer {
    /// Creates the file and writes the header, which the budget never cuts.
    fn open(&mut self) -> io::Result<()> {
        let config = state::config().ok_or_else(|| io::Error::other("no configuration"))?;
        let pid = self.out.pid();
        let mut sink = TraceSink::create_rotating(&config.destination, pid, config.max_bytes, config.rotate)?;
        format::crash::file_opened(sink.as_raw_fd(), sink.budget());
        let written = sink.write_header_with(self.header(config.interval_ms, pid));
        format::crash::flushed(sink.written());
        self.out.sink = Some(sink);
        written
    }

    /// What writes the header (a rotating trace keeps it for its later segments' headers).
    fn header(&self, interval_ms: u64, pid: u32) -> HeaderWriter {
        format::sink::process_header(record::Header {
            pid,
            start_ns: self.last_t,
            interval_ms,
            shape_buckets: SHAPE_BUCKETS as u32,
            max_kernels: registry::max_kernels(),
            max_bytes: state::config().map_or(0, |c| c.max_bytes),
            observer: env!("CARGO_PKG_VERSION"),
            writer: format::OBSERVER_WRITER_NAME,
            ..record::Header::default()
        })
    }

    fn definitions(&mut self) -> Result<(), Stop> {
        let count = registry::slot_count();
        while self.defined < count {
            let id = self.defined;
            if let Some(meta) = registry::slot(id).and_then(|s| s.meta()) {
                let def = record::KernelDef::new(id, meta.name.as_bytes(), meta.api.as_str(), meta.source.as_str());
                record::kernel(&mut self.out.buf, &def);
            }
            self.defined += 1;
            self.write_if_large()?;
        }
        let overflow_used = registry::slot(registry::OVERFLOW_SLOT).is_some_and(|s| s.shape_counts().launches() > 0);
        if !self.overflow_defined && (registry::overflowed() || overflow_used) {
            self.overflow_defined = true;
            let def = record::KernelDef::new(
                registry::OVERFLOW_SLOT,
                b"(overflow)",
                record::api::OVERFLOW,
                record::source::NONE,
            );
            record::kernel(&mut self.out.buf, &def);
            let detail = format!(
                "more than {} distinct kernels ({}); the others are counted as kernel 0",
                registry::max_kernels(),
                format::env::MAX_KERNELS
            );
            self.warning(record::warning::KERNEL_TABLE_FULL, &detail);
        }
        Ok(())
    }

    fn warning(&mut self, code: &'static str, detail: &str) {
        if self.warned.insert(code) {
            record::warning_record(&mut self.out.buf, code, detail);
        }
    }

    /// One window line with the deltas since the last flush; nothing if nothing changed.
    fn window(&mut self) {
        // Only kernels whose definition is written: one registered after the definition pass is
        // counted in the next window, after its definition.
        let count = self.defined as usize;
        if self.last.len() < count {
            self.last.resize(count, [0; 4]);
        }
        let mut lists: [Vec<(u32, u64)>; 4] = Default::default();
        let mut shapes: Vec<ShapeCount> = Vec::new();
        let mut other_shapes: Vec<(u32, u64)> = Vec::new();
        let first = if self.overflow_defined { 0 } else { 1 };
        for id in first..count as u32 {
            let Some(slot) = registry::slot(id) else { continue };
            let shape_counts = slot.shape_counts();
            let now = [shape_counts.launches(), slot.errors.load(), slot.graph.load(), slot.captured.load(RELAXED)];
            let before = std::mem::replace(&mut self.last[id as usize], now);
            for (list, (n, b)) in lists.iter_mut().zip(now.iter().zip(before)) {
                if *n != b {
                    list.push((id, n.wrapping_sub(b)));
                }
            }
            if now[0] != before[0] {
                self.shape_deltas(id, &shape_counts, &mut shapes, &mut other_shapes);
            }
        }
        let graph_now = [
            graphs::graph_launches(),
            graphs::unknown_graph_launches(),
            graphs::unattributed_captures(),
            graphs::expired_captures(),
        ];
        let graph_delta: Vec<u64> = graph_now.iter().zip(self.last_graph).map(|(n, b)| n.wrapping_sub(b)).collect();
        self.last_graph = graph_now;
        if graph_delta[1] > 0 {
            self.warning(
                record::warning::UNKNOWN_GRAPH_EXEC,
                "graph launches of execs whose graph was not captured under observation; their kernels are not counted",
            );
        }
        if graph_delta[2] > 0 {
            self.warning(
                record::warning::UNATTRIBUTED_CAPTURE,
                "launches recorded into a capture that could not be told apart from another; not counted on replay",
            );
        }
        if graph_delta[3] > 0 {
            self.warning(
                record::warning::STALE_CAPTURE,
                "a stream capture ended where no hook saw it (an unhooked EndCapture or stream destroy); its record \
                 expired, later launches on its stream count as executed, and replays of its graph are \
                 unknown_graph_launches",
            );
        }
        // t1 is read after the scan: every launch counted here happened before t1.
        let t0 = self.last_t;
        let t1 = now_ns().max(t0);
        self.last_t = t1;
        // Launches from now on are counted in the window that starts here.
        crate::locus::OPEN_WINDOW_T0.store(t1, std::sync::atomic::Ordering::Relaxed);
        let empty = lists.iter().all(Vec::is_empty) && graph_delta.iter().all(|&d| d == 0);
        if empty && shapes.is_empty() && other_shapes.is_empty() {
            return;
        }
        let [counts, errors, graph, captured] = &lists;
        let window = record::Window {
            t0,
            t1,
            counts,
            errors,
            graph,
            captured,
            shapes: &shapes,
            other_shapes: &other_shapes,
            graph_launches: graph_delta[0],
            unknown_graph_launches: graph_delta[1],
            unattributed_captures: graph_delta[2],
            expired_captures: graph_delta[3],
            submits: 0,
            sequences: &[],
        };
        record::window(&mut self.out.buf, &window);
    }

    /// Per-shape deltas of kernel `id` since its last window, from `counts` (the same reading
    /// that gave the window's launch count, so the two always agree).
    fn shape_deltas(
        &mut self,
        id: u32,
        counts: &ShapeCounts,
        shapes: &mut Vec<ShapeCount>,
        other: &mut Vec<(u32, u64)>,
    ) {
        let grown = self.last_shapes.take(id, &counts.entries, counts.other, |s, count| {
            shapes.push(ShapeCount { kernel: id, grid: s.grid, block: s.block, count })
        });
        if let Some(n) = grown {
            other.push((id, n));
        }
    }

    fn write_if_large(&mut self) -> Result<(), Stop> {
        if self.out.buf.len() >= WRITE_CHUNK {
            self.out.write_out()?;
        }
        Ok(())
    }

    fn flush(&mut self, kind: Flush) -> Result<(), Stop> {
        if self.out.sink.is_none() {
            self.open()?;
        }
        self.definitions()?;
        self.window();
        if let Some((seq, at_ns)) = format::crash::survived_signal() {
            record::signal_returned(&mut self.out.buf, seq, at_ns);
        }
        if kind == Flush::Exit {
            // Nothing may follow the end record: no crash record from now on.
            format::crash::finish_exclusive();
            record::end(&mut self.out.buf, now_ns());
        }
        self.out.write_out()?;
        crate::crash::kernels_defined(self.defined, self.overflow_defined);
        Ok(())
    }
}

const RELAXED: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;

/// Flushes; returns false once the writer is finished (exit flush done, or failed).
fn flush(kind: Flush) -> bool {
    format::writer::flush_locked(&WRITER, kind, &STOPPED, |writer| writer.flush(kind))
}

/// How the observer says that its trace stopped before the process.
const STOPPED: StopReport = StopReport {
    budget: || state::config().map_or((0, 0), |c| (c.max_bytes, c.rotate)),
    note: state::note,
    disable: state::disable,
    disabled: "observer disabled",
};

/// Starts the writer thread: a window every `interval_ms` (none when 0), and one whenever the crash
/// handler asks for the open window (`format::crash`).
pub fn spawn_thread(interval_ms: u64) {
    let what = WriterLoop { interval_ms, on_start: pin_in_memory, running: state::is_on, flush: flush_window };
    if !format::writer::spawn("backscope-obs", what) {
        // Without the thread there are no periodic windows, but the exit flush still writes
        // everything as one window.
        state::note(format_args!("could not start the writer thread; the trace will be written at exit only"));
    }
}

/// The writer thread runs code of this library until the process ends, so the library must never
/// be unloaded, even if someone loads it with `dlopen` and later `dlclose`s it. On the writer
/// thread: it takes the dynamic loader's lock, which a thread waiting for the observer's start may
/// hold.
fn pin_in_memory() {
    format::runtime::pin_in_memory(pin_in_memory as *const () as usize);
}

fn flush_window(periodic: bool) -> bool {
    let mut open = true;
    state::guarded(|| open = flush(Flush::Window));
    if open && periodic {
        graphs::reclaim_if_idle();
    }
    open
}

/// In a forked child (single-threaded): drop the parent's writer state. Its lock may have been held
/// by the parent's writer thread, which does not exist here; then the state may be half-updated and
/// is leaked rather than dropped.
pub const FORK: ForkHandlers = ForkHandlers::child(reset_in_child);

fn reset_in_child() {
    let was_locked = WRITER.is_locked();
    WRITER.release_for_fork();
    // SAFETY: atfork child handler: the only thread of the process, and no reference is kept.
    let state = unsafe { WRITER.get_unchecked_mut() };
    if let Some(old) = state.take() {
        if was_locked {
            std::mem::forget(old);
        } else {
            drop(old); // closes the child's copy of the parent's descriptor
        }
    }
}

format::flush_at_exit!(state::is_on, || flush(Flush::Exit));
