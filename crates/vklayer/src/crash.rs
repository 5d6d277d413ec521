//! The layer's crash record: on SIGSEGV, SIGBUS, SIGABRT or SIGILL it writes the last dispatches
//! each Vulkan queue was given and the Vulkan call each thread was inside (`crate::locus`) into the
//! trace, as a `crash` record with `queues` (docs/trace-format.md), then hands the signal on, so that
//! the program's own crash report still appears and its exit status is the one it would have without
//! the layer. Without it a process that dies after or inside Vulkan work leaves no pipeline and no
//! dispatch: the counts are only written by the writer thread's windows and the exit flush.
//!
//! The handler is installed when the layer starts (the first `vkCreateInstance` with a trace
//! destination). A Go program such as Ollama's runner has set its runtime's handlers up long before
//! its first Vulkan call, so the layer's handler comes after Go's and calls it, which reports and
//! exits as it always does (the CUDA/HIP observer defers its handler to the first launch for the same
//! reason; `crates/observer/src/crash.rs`).
//!
//! The handler, async-signal-safe throughout (no allocation, no lock, `write(2)` from static buffers):
//! 1. asks the writer thread to write the open window (an `eventfd` write) and waits for it, at most
//!    [`FLUSH_WAIT_MS`]: the writer allocates and locks, which the handler must not, and if the crash
//!    left a lock held the wait just ends. The window holds every dispatch submitted so far, and the
//!    definitions of their pipelines;
//! 2. writes the `crash` record with one `write` to a duplicate of the trace file's descriptor; a
//!    remembered dispatch whose pipeline has no definition in the file yet (the flush did not happen)
//!    is left out and counted as `omitted`;
//! 3. chains to what was installed before: the default action is restored and the signal raised
//!    again (it is blocked, so it arrives as the handler returns); an ignored signal stays ignored; a
//!    handler function is called with the same arguments.
//!
//! Only one thread writes at a time; a second crashing thread waits for it (bounded) and chains. At
//! most [`MAX_RECORDS`] crash records are written per process. Nothing is written once the writer
//! wrote the trace's last record (`end` or `truncated`), or when the trace file was never opened.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

use format::clock::now_ns;
use format::json::FixedBuf;
use format::record::{self, CrashQueue, CrashThread, QueueDispatch};

use crate::locus::{self, LabelText, LABEL_BYTES, QUEUES, RING_DISPATCHES};

/// The signals a crash record is written for.
pub const SIGNALS: [c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT, libc::SIGILL];
/// Longest wait for the writer thread's flush.
pub const FLUSH_WAIT_MS: u64 = 1000;
/// Longest wait of a second crashing thread for the first to finish its record.
const OTHER_CRASH_WAIT_MS: u64 = 2000;
/// Crash records per process.
pub const MAX_RECORDS: u32 = 8;
/// Threads listed in one crash record: the receiving one and those inside a Vulkan call.
const MAX_THREADS: usize = 16;
/// Room for one crash record.
const RECORD_BUFFER: usize = 64 * 1024;

const NO_FILE: i32 = -1;
const FINISHED: i32 = -2;

/// Duplicate of the trace file's descriptor, made when the writer opened it.
static TRACE_FD: AtomicI32 = AtomicI32::new(NO_FILE);
/// Bytes the handler wrote (the writer counts them against the budget), and bytes the writer wrote.
static EXTRA_WRITTEN: AtomicU64 = AtomicU64::new(0);
static WRITTEN: AtomicU64 = AtomicU64::new(0);
static MAX_BYTES: AtomicU64 = AtomicU64::new(0);
/// The writer thread's request `eventfd` and its thread id; -1 and 0 without one.
static FLUSH_FD: AtomicI32 = AtomicI32::new(-1);
static WRITER_TID: AtomicU32 = AtomicU32::new(0);
static REQUESTED: AtomicU64 = AtomicU64::new(0);
static SERVED: AtomicU64 = AtomicU64::new(0);
/// Thread id of the thread writing a crash record now; 0 when none.
static HANDLING: AtomicU32 = AtomicU32::new(0);
static SEQ: AtomicU32 = AtomicU32::new(0);

const UNARMED: u8 = 0;
const ARMING: u8 = 1;
const ARMED: u8 = 2;
static ARM: AtomicU8 = AtomicU8::new(UNARMED);

/// Data written once before the handler is installed, read-only afterwards.
struct SetOnce<T>(UnsafeCell<T>);
// SAFETY: written only by the arming thread before the handler that reads it exists (ARMING excludes
// a second writer); read-only afterwards.
unsafe impl<T> Sync for SetOnce<T> {}

/// Data only the thread holding `HANDLING` touches.
struct HandlerOnly<T>(UnsafeCell<T>);
// SAFETY: `HANDLING` (a compare-exchange from 0 to the thread id) admits one thread at a time.
unsafe impl<T> Sync for HandlerOnly<T> {}

static PREVIOUS: SetOnce<[libc::sigaction; 4]> =
    // SAFETY: sigaction is plain data; all zeroes is SIG_DFL with no flags.
    SetOnce(UnsafeCell::new(unsafe { std::mem::zeroed() }));

/// The rings' label paths, as read (the scratch's dispatches borrow them).
pub type QueueTexts = [[LabelText; RING_DISPATCHES]; QUEUES];

struct Scratch {
    record: FixedBuf<RECORD_BUFFER>,
    dispatches: [[QueueDispatch<'static>; RING_DISPATCHES]; QUEUES],
}

static SCRATCH: HandlerOnly<Scratch> = HandlerOnly(UnsafeCell::new(Scratch {
    record: FixedBuf::new(),
    dispatches: [[QueueDispatch { kernel: 0, submit: 0, grid: [0; 3], count: 0, label: b"" }; RING_DISPATCHES]; QUEUES],
}));
static SCRATCH_TEXTS: HandlerOnly<QueueTexts> =
    HandlerOnly(UnsafeCell::new([[[0; LABEL_BYTES]; RING_DISPATCHES]; QUEUES]));

// ---- What the writer tells the handler ----

/// The writer opened the trace file (budget `max_bytes`, 0: none): keep a duplicate of its descriptor.
pub fn file_opened(fd: c_int, max_bytes: u64) {
    // SAFETY: duplicates a descriptor the writer just opened (close-on-exec, kept for the process).
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup >= 0 {
        MAX_BYTES.store(max_bytes, Ordering::Release);
        TRACE_FD.store(dup, Ordering::Release);
    }
}

/// After a write: the bytes the writer has written.
pub fn flushed(written: u64) {
    WRITTEN.store(written, Ordering::Release);
}

/// The writer is about to write the last record (end or truncated), or writing failed: from now on
/// the handler writes nothing, and a record it is writing now is finished first (bounded wait).
pub fn finish_exclusive() {
    TRACE_FD.store(FINISHED, Ordering::Release);
    let me = locus::gettid();
    wait_until(OTHER_CRASH_WAIT_MS, || {
        matches!(HANDLING.load(Ordering::Acquire), 0) || HANDLING.load(Ordering::Acquire) == me
    });
}

/// Bytes the handler added to the file.
pub fn extra_written() -> u64 {
    EXTRA_WRITTEN.load(Ordering::Acquire)
}

/// The writer thread waits on `efd` for flush requests.
pub fn writer_thread_started(efd: c_int) {
    WRITER_TID.store(locus::gettid(), Ordering::Release);
    FLUSH_FD.store(efd, Ordering::Release);
}

pub fn writer_thread_ended() {
    FLUSH_FD.store(-1, Ordering::Release);
    WRITER_TID.store(0, Ordering::Release);
}

/// The newest flush request; the writer passes it to [`request_served`] after flushing.
pub fn pending_request() -> u64 {
    REQUESTED.load(Ordering::Acquire)
}

pub fn request_served(request: u64) {
    SERVED.fetch_max(request, Ordering::AcqRel);
}

/// In a forked child: the parent's file, writer thread and records are not the child's (and the
/// child does not observe).
pub fn reset_in_child() {
    let fd = TRACE_FD.swap(FINISHED, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: closes the child's copy of the duplicate; the parent keeps its own.
        unsafe { libc::close(fd) };
    }
    FLUSH_FD.store(-1, Ordering::Relaxed);
    WRITER_TID.store(0, Ordering::Relaxed);
    HANDLING.store(0, Ordering::Relaxed);
}

// ---- Installing the handler ----

/// Installs the handler for [`SIGNALS`], once (when the layer starts).
pub fn arm() {
    if ARM.compare_exchange(UNARMED, ARMING, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return;
    }
    // SAFETY: ARMING admits this thread alone, and no handler that reads PREVIOUS is installed yet.
    let previous = unsafe { &mut *PREVIOUS.0.get() };
    for (signal, previous) in SIGNALS.iter().zip(previous.iter_mut()) {
        // SAFETY: sigaction is plain data; it is filled in before use.
        let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
        ours.sa_sigaction = on_signal as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize;
        // SA_ONSTACK: on an alternate signal stack where the thread has one (Go requires it of every
        // handler, and a stack overflow needs it); every signal blocked while the handler runs.
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        // SAFETY: valid pointers; `previous` receives the handler in place now, which `on_signal` chains to.
        unsafe {
            libc::sigfillset(&mut ours.sa_mask);
            libc::sigaction(*signal, &ours, previous);
        }
    }
    ARM.store(ARMED, Ordering::Release);
}

// ---- The handler ----

extern "C" fn on_signal(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: __errno_location returns this thread's errno; the handler leaves it as it found it.
    let errno = unsafe { *libc::__errno_location() };
    let Some(index) = SIGNALS.iter().position(|&s| s == signal) else { return };
    // SAFETY: written before this handler was installed, read-only since.
    let previous = unsafe { &(*PREVIOUS.0.get())[index] };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; a null one is tolerated.
    let (code, addr, sender) = match unsafe { info.as_ref() } {
        // SAFETY: si_pid is the member a sent signal (si_code <= 0) fills in, si_addr the one a fault does.
        Some(i) if i.si_code <= 0 => (i.si_code, 0, unsafe { i.si_pid() } as u32),
        // SAFETY: as above.
        Some(i) => (i.si_code, unsafe { i.si_addr() } as u64, 0),
        None => (0, 0, 0),
    };
    let sent = code <= 0;
    let tid = locus::gettid();
    // A sent signal that the program ignores changes nothing: no record.
    if !(sent && previous.sa_sigaction == libc::SIG_IGN) {
        match HANDLING.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                write_record(signal, code, addr, sent.then_some(sender), tid);
                HANDLING.store(0, Ordering::Release);
            }
            // This thread faulted while writing its record: only chain.
            Err(owner) if owner == tid => {}
            Err(_) => {
                wait_until(OTHER_CRASH_WAIT_MS, || HANDLING.load(Ordering::Acquire) == 0);
            }
        }
    }
    chain(signal, previous, info, context, tid);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Hands the signal to what was installed before the layer.
fn chain(signal: c_int, previous: &libc::sigaction, info: *mut libc::siginfo_t, context: *mut c_void, tid: u32) {
    match previous.sa_sigaction {
        libc::SIG_DFL => {
            // The default action, for this very signal: blocked while the handler runs, it arrives
            // (and takes the process down) as the handler returns; a fault would recur too.
            // SAFETY: restores the saved disposition and re-sends the signal to this thread.
            unsafe {
                libc::sigaction(signal, previous, std::ptr::null_mut());
                libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, signal);
            }
        }
        libc::SIG_IGN => {
            // A fault recurs as the handler returns and the kernel then forces the default action,
            // as it would have without the layer.
            // SAFETY: restores the saved disposition.
            unsafe { libc::sigaction(signal, previous, std::ptr::null_mut()) };
        }
        handler => {
            if previous.sa_flags & libc::SA_RESETHAND != 0 {
                // SAFETY: a zeroed sigaction is SIG_DFL; the kernel would have reset it on delivery.
                unsafe {
                    let default: libc::sigaction = std::mem::zeroed();
                    libc::sigaction(signal, &default, std::ptr::null_mut());
                }
            }
            if previous.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the program installed this function as an SA_SIGINFO handler for `signal`.
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(signal, info, context);
            } else {
                // SAFETY: the program installed this function as a plain handler for `signal`.
                let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
                f(signal);
            }
        }
    }
}

/// Waits, polling every millisecond with `nanosleep` (async-signal-safe), until `done` or `ms` passed.
fn wait_until(ms: u64, done: impl Fn() -> bool) -> bool {
    let step = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
    for _ in 0..ms {
        if done() {
            return true;
        }
        // SAFETY: sleeps this thread; an interruption only shortens one step.
        unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
    }
    done()
}

/// Asks the writer thread to write the open window and waits for it; whether it did.
fn flush_open_window(tid: u32) -> bool {
    let efd = FLUSH_FD.load(Ordering::Acquire);
    if !crate::state::on() || efd < 0 || WRITER_TID.load(Ordering::Acquire) == tid {
        return false;
    }
    let request = REQUESTED.fetch_add(1, Ordering::AcqRel) + 1;
    let one: u64 = 1;
    // SAFETY: an 8-byte write to the writer thread's eventfd wakes it.
    if unsafe { libc::write(efd, (&one as *const u64).cast(), 8) } != 8 {
        return false;
    }
    wait_until(FLUSH_WAIT_MS, || SERVED.load(Ordering::Acquire) >= request)
}

/// Reads every claimed queue ring into `dispatches` (their label paths into `texts`), keeping only dispatches
/// whose pipeline the file defines; fills `queues` and returns how many.
pub fn read_queues<'a>(
    dispatches: &'a mut [[QueueDispatch<'a>; RING_DISPATCHES]; QUEUES],
    texts: &'a mut QueueTexts,
    queues: &mut [Option<CrashQueue<'a>>; QUEUES],
) -> usize {
    let mut n = 0;
    let mut lens = [(0u32, 0usize, 0u32, None, 0u64); QUEUES];
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
        n += 1;
    }
    for ((slot, out), (number, kept, omitted, device, submits)) in
        queues.iter_mut().zip(dispatches.iter()).zip(lens.iter().copied()).take(n)
    {
        *slot = Some(CrashQueue { queue: number, device, submits, dispatches: &out[..kept], omitted });
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

/// Writes the crash record; whether it was written.
fn write_record(signal: c_int, code: c_int, addr: u64, sender: Option<u32>, tid: u32) -> bool {
    if SEQ.load(Ordering::Relaxed) >= MAX_RECORDS || TRACE_FD.load(Ordering::Acquire) == FINISHED {
        return false;
    }
    let flushed = flush_open_window(tid);
    let fd = TRACE_FD.load(Ordering::Acquire);
    if fd < 0 {
        return false;
    }
    // SAFETY: this thread holds HANDLING, which admits one thread to the scratch space.
    let scratch = unsafe { &mut *SCRATCH.0.get() };
    let seq = SEQ.fetch_add(1, Ordering::AcqRel) + 1;
    let mut threads = [CrashThread { tid, in_flight: None, launches: &[] }; MAX_THREADS];
    let n_threads = threads_in_calls(tid, &mut threads);
    let mut queues: [Option<CrashQueue<'_>>; QUEUES] = [None; QUEUES];
    // SAFETY: as above.
    let texts = unsafe { &mut *SCRATCH_TEXTS.0.get() };
    let n_queues = read_queues(&mut scratch.dispatches, texts, &mut queues);
    let mut listed = [CrashQueue { queue: 0, device: None, submits: 0, dispatches: &[], omitted: 0 }; QUEUES];
    for (l, q) in listed.iter_mut().zip(queues.iter().flatten()) {
        *l = *q;
    }
    let crash = record::Crash {
        seq,
        signal,
        code,
        addr,
        sender_pid: sender,
        at_ns: now_ns(),
        tid,
        flushed,
        threads: &threads[..n_threads],
    };
    let record_buf = &mut scratch.record;
    record_buf.clear();
    record::crash_with_queues(record_buf, &crash, &listed[..n_queues]);
    if record_buf.overflowed() || record_buf.len() as u64 > room_in_budget() {
        return false;
    }
    if write_all(fd, record_buf.as_bytes()) {
        EXTRA_WRITTEN.fetch_add(record_buf.len() as u64, Ordering::AcqRel);
        return true;
    }
    false
}

/// Bytes the budget still allows (the writer's `truncated` record keeps its reserve).
fn room_in_budget() -> u64 {
    let max_bytes = MAX_BYTES.load(Ordering::Acquire);
    if max_bytes == 0 {
        return u64::MAX;
    }
    let used = WRITTEN.load(Ordering::Acquire) + EXTRA_WRITTEN.load(Ordering::Acquire);
    max_bytes.saturating_sub(format::sink::CUT_RECORD_RESERVE).saturating_sub(used)
}

fn write_all(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice to a descriptor this module owns.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            // SAFETY: reads this thread's errno.
            if unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            return false;
        }
        if n == 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
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
        let mut queues = [None; QUEUES];
        let n = read_queues(&mut dispatches, &mut texts, &mut queues);
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
