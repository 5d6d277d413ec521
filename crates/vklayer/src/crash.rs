//! The layer's crash record: on SIGSEGV, SIGBUS, SIGABRT or SIGILL it writes the last dispatches
//! each Vulkan queue was given and the Vulkan call each thread was inside (`crate::locus`) into the
//! trace, as a `crash` record with `queues` (docs/trace-format.md), then hands the signal on, so that
//! the program's own crash report still appears and its exit status is the one it would have without
//! the layer. Without it a process that dies after or inside Vulkan work leaves no pipeline and no
//! dispatch: the counts are only written by the writer thread's windows and the exit flush.
//!
//! The handler itself (flush request to the writer thread, one record at a time, chaining to the
//! program's handler, async-signal-safe throughout) is the runtime both observer libraries share,
//! `format::crash`; this module says what the layer's record holds. It is installed when the layer
//! starts (the first `vkCreateInstance` with a trace destination). A Go program such as Ollama's runner
//! has set its runtime's handlers up long before its first Vulkan call, so the layer's handler comes
//! after Go's and calls it, which reports and exits as it always does (the CUDA/HIP observer defers its
//! handler to the first launch for the same reason; `crates/observer/src/crash.rs`).
//!
//! A remembered dispatch whose pipeline has no definition in the file yet (the flush did not happen)
//! is left out and counted as `omitted`. Nothing is written when the trace file was never opened.

use std::cell::UnsafeCell;

use format::crash::{CrashHooks, RecordBuf};
use format::fork::ForkHandlers;
use format::record::{self, Crash, CrashQueue, CrashThread, InFlightDispatch, QueueDispatch, QueueProgress};

use crate::locus::{self, LabelText, LABEL_BYTES, QUEUES, RING_DISPATCHES};
use crate::progress::{By, MAX_IN_FLIGHT};

/// Threads listed in one crash record: the receiving one and those inside a Vulkan call.
const MAX_THREADS: usize = 16;

/// Data only the thread writing a crash record touches (`format::crash` admits one at a time).
struct HandlerOnly<T>(UnsafeCell<T>);
// SAFETY: `format::crash` calls `write_record` from one thread at a time (its handling flag).
unsafe impl<T> Sync for HandlerOnly<T> {}

/// The rings' label paths, as read (the scratch's dispatches borrow them).
pub type QueueTexts = [[LabelText; RING_DISPATCHES]; QUEUES];

static DISPATCHES: HandlerOnly<[[QueueDispatch<'static>; RING_DISPATCHES]; QUEUES]> = HandlerOnly(UnsafeCell::new(
    [[QueueDispatch { kernel: 0, submit: 0, grid: [0; 3], count: 0, label: b"" }; RING_DISPATCHES]; QUEUES],
));
static TEXTS: HandlerOnly<QueueTexts> = HandlerOnly(UnsafeCell::new([[[0; LABEL_BYTES]; RING_DISPATCHES]; QUEUES]));
static IN_FLIGHT: HandlerOnly<InFlightLists> = HandlerOnly(UnsafeCell::new(
    [[InFlightDispatch { kernel: 0, submit: 0, index: 0, grid: [0; 3] }; MAX_IN_FLIGHT]; QUEUES],
));

/// Per queue, the black box's in-flight dispatches as read.
pub type InFlightLists = [[InFlightDispatch; MAX_IN_FLIGHT]; QUEUES];

/// Installs the handler, once (when the layer starts).
pub fn arm() {
    format::crash::install(CrashHooks { observing: crate::state::on, create_file: None, record: write_record });
}

/// In a forked child: the parent's file, writer thread and records are not the child's, and the child does not
/// observe.
pub const FORK: ForkHandlers = ForkHandlers::child(reset_in_child);

fn reset_in_child() {
    format::crash::reset_in_child(false);
}

/// Reads every claimed queue ring into `dispatches` (their label paths into `texts`), keeping only dispatches
/// whose pipeline the file defines, and the black box's progress of each queue (its in-flight dispatches into
/// `in_flight`); fills `queues` and returns how many.
pub fn read_queues<'a>(
    dispatches: &'a mut [[QueueDispatch<'a>; RING_DISPATCHES]; QUEUES],
    texts: &'a mut QueueTexts,
    in_flight: &'a mut InFlightLists,
    queues: &mut [Option<CrashQueue<'a>>; QUEUES],
) -> usize {
    let mut n = 0;
    let mut lens = [(0u32, 0usize, 0u32, None, 0u64); QUEUES];
    let mut states = [crate::progress::QueueState::default(); QUEUES];
    for (((number, ring), out), texts) in locus::queue_rings().zip(dispatches.iter_mut()).zip(texts.iter_mut()) {
        let read = ring.read(out, texts);
        // Dispatches of pipelines the file does not define cannot be named: left out, counted.
        let mut kept = 0;
        let mut omitted = 0u32;
        for i in 0..read {
            if crate::pipelines::is_defined(out[i].kernel) {
                out[kept] = out[i];
                kept += 1;
            } else {
                omitted = omitted.saturating_add(out[i].count.max(1));
            }
        }
        lens[n] = (number, kept, omitted, ring.device(), ring.submits());
        states[n] = crate::progress::read(&ring.progress);
        n += 1;
    }
    for ((((slot, out), (number, kept, omitted, device, submits)), state), listed) in queues
        .iter_mut()
        .zip(dispatches.iter())
        .zip(lens.iter().copied())
        .zip(states.iter())
        .zip(in_flight.iter_mut())
        .take(n)
    {
        let progress = (state.by != By::Nothing).then(|| {
            let mut k = 0;
            let mut more = state.more_in_flight;
            for d in state.in_flight() {
                if crate::pipelines::is_defined(d.kernel) {
                    listed[k] = InFlightDispatch { kernel: d.kernel, submit: d.submit, index: d.index, grid: d.grid };
                    k += 1;
                } else {
                    more = more.saturating_add(1);
                }
            }
            (k, more)
        });
        *slot = Some(CrashQueue {
            queue: number,
            device,
            submits,
            dispatches: &out[..kept],
            omitted,
            progress: progress.map(|(k, more)| QueueProgress {
                by: state.by.name(),
                completed: state.completed,
                in_flight: &listed[..k],
                more_in_flight: more,
                not_started: state.not_started,
                pending: state.pending,
                unconfirmed: state.unconfirmed,
            }),
        });
    }
    n
}

/// The threads inside a Vulkan call, the receiving thread first (listed even outside any call).
pub fn threads_in_calls(tid: u32, out: &mut [CrashThread<'static>]) -> usize {
    let mut n = 0;
    let own = locus::call_slots().find(|s| s.tid() == tid).and_then(|s| s.call());
    if let Some(first) = out.first_mut() {
        *first = CrashThread { tid, in_flight: own, launches: &[] };
        n = 1;
    }
    for slot in locus::call_slots().filter(|s| s.tid() != tid) {
        if n >= out.len() {
            break;
        }
        if let Some(call) = slot.call() {
            out[n] = CrashThread { tid: slot.tid(), in_flight: Some(call), launches: &[] };
            n += 1;
        }
    }
    n
}

/// The crash record of `crash` into `out` (within `budget` bytes): the threads inside a Vulkan call and every
/// queue's last dispatches. Called from the signal handler: allocates nothing, takes no lock.
fn write_record(crash: &Crash<'_>, budget: u64, out: &mut RecordBuf) -> bool {
    let mut threads = [CrashThread { tid: crash.tid, in_flight: None, launches: &[] }; MAX_THREADS];
    let n_threads = threads_in_calls(crash.tid, &mut threads);
    let mut queues: [Option<CrashQueue<'_>>; QUEUES] = [None; QUEUES];
    // SAFETY: one thread at a time writes a record (see `HandlerOnly`).
    let (dispatches, texts, in_flight) =
        unsafe { (&mut *DISPATCHES.0.get(), &mut *TEXTS.0.get(), &mut *IN_FLIGHT.0.get()) };
    let n_queues = read_queues(dispatches, texts, in_flight, &mut queues);
    let mut listed =
        [CrashQueue { queue: 0, device: None, submits: 0, dispatches: &[], omitted: 0, progress: None }; QUEUES];
    for (l, q) in listed.iter_mut().zip(queues.iter().flatten()) {
        *l = *q;
    }
    record::crash_with_queues(out, &Crash { threads: &threads[..n_threads], ..*crash }, &listed[..n_queues]);
    !out.overflowed() && out.len() as u64 <= budget
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_dispatches_of_undefined_pipelines_are_left_out_and_counted() {
        let _serial = crate::pipelines::tests::TEST_LOCK.lock().unwrap();
        crate::pipelines::init(1 << 20);
        let defined = crate::pipelines::add_pipeline(crate::pipelines::tests::meta("defined"));
        let undefined = crate::pipelines::add_pipeline(crate::pipelines::tests::meta("not yet"));
        crate::pipelines::mark_defined(defined);
        let ring = locus::queue_ring(0x5151, Some(1)).unwrap();
        let submit = ring.begin_submit();
        ring.push(defined, [4, 1, 1], 2, submit, b"");
        ring.push(undefined, [1, 1, 1], 3, submit, b"");
        ring.push(defined, [8, 1, 1], 1, submit, b"ADD node");
        let mut dispatches = Box::new([[QueueDispatch::default(); RING_DISPATCHES]; QUEUES]);
        let mut texts = Box::new([[[0; LABEL_BYTES]; RING_DISPATCHES]; QUEUES]);
        let mut in_flight = Box::new([[InFlightDispatch::default(); MAX_IN_FLIGHT]; QUEUES]);
        let mut queues = [None; QUEUES];
        let n = read_queues(&mut dispatches, &mut texts, &mut in_flight, &mut queues);
        let q = queues[..n].iter().flatten().find(|q| q.device == Some(1)).expect("the queue's ring");
        let kept: Vec<(u32, [u32; 3], u32, &[u8])> =
            q.dispatches.iter().map(|d| (d.kernel, d.grid, d.count, d.label)).collect();
        assert_eq!(kept, [(defined, [4, 1, 1], 2, &b""[..]), (defined, [8, 1, 1], 1, &b"ADD node"[..])]);
        assert_eq!(q.omitted, 3);
        assert!(q.submits >= 1);
    }

    #[test]
    fn the_receiving_thread_comes_first_then_threads_inside_a_vulkan_call() {
        static CALL: &str = "vkQueueWaitIdle";
        let (entered, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let other = std::thread::spawn(move || {
            let _inside = locus::Marked::enter(&CALL);
            entered.0.send(locus::gettid()).unwrap();
            release.1.recv().unwrap();
        });
        let other_tid = entered.1.recv().unwrap();
        let me = locus::gettid();
        let mut threads = [CrashThread { tid: 0, in_flight: None, launches: &[] }; MAX_THREADS];
        let n = threads_in_calls(me, &mut threads);
        assert_eq!((threads[0].tid, threads[0].in_flight), (me, None));
        assert!(threads[1..n].iter().any(|t| t.tid == other_tid && t.in_flight == Some("vkQueueWaitIdle")));
        release.0.send(()).unwrap();
        other.join().unwrap();
    }
}
