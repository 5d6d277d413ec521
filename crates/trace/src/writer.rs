//! The writer side both observer libraries share: the writer thread (a window every interval, and at once when the
//! crash handler asks), the per-shape deltas of a window, the trace file with the lines gathered for it
//! ([`TraceOut`]: writing them beside the crash handler, and what happens when a trace stops before its process),
//! and the flush at exit ([`flush_at_exit!`](crate::flush_at_exit)). What a flush writes stays each library's own.

use std::collections::HashMap;
use std::fmt;
use std::io;

use crate::clock::now_ns;
use crate::crash;
use crate::sink::{Stop, TraceSink};
use crate::spin::SpinLock;

/// Bytes a writer gathers before a `write`; always cut at a line boundary.
pub const WRITE_CHUNK: usize = 64 * 1024;

/// Which flush: a window (the interval's, or one the crash handler or the library asked for), or the last one,
/// at exit, which ends the trace with its `end` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    Window,
    Exit,
}

/// A library's writer, kept in a lock and made at the first flush: what it gathers is its own, the trace file it
/// writes is a [`TraceOut`].
pub trait TraceWriter {
    fn new() -> Self;
    fn out(&mut self) -> &mut TraceOut;
}

/// One flush of the writer in `slot`, under its lock: the writer made if this is the first flush, nothing done once
/// its trace is finished (or another process's), else `write` and its result settled ([`TraceOut::settle`]).
/// Returns false once the writer is finished.
pub fn flush_locked<W: TraceWriter>(
    slot: &SpinLock<Option<W>>,
    kind: Flush,
    report: &StopReport,
    write: impl FnOnce(&mut W) -> Result<(), Stop>,
) -> bool {
    let mut guard = slot.lock();
    let writer = guard.get_or_insert_with(W::new);
    if !writer.out().writable() {
        return false;
    }
    let result = write(writer);
    writer.out().settle(kind, result, report)
}

/// How a library says that its trace stopped before its process.
#[derive(Clone, Copy, Debug)]
pub struct StopReport {
    /// The trace's budget and segments (`BACKSCOPE_TRACE_MAX_BYTES`, `BACKSCOPE_TRACE_ROTATE`), for the line of
    /// a spent budget.
    pub budget: fn() -> (u64, u32),
    /// One line on stderr; the library goes on observing.
    pub note: fn(fmt::Arguments<'_>),
    /// One line on stderr, and the library stops observing.
    pub disable: fn(fmt::Arguments<'_>),
    /// What `disable` means, in the line that says why ("observer disabled").
    pub disabled: &'static str,
}

/// A writer's trace file (opened by the library at its first flush), the lines gathered for it, and whether the
/// trace is finished.
#[derive(Debug)]
pub struct TraceOut {
    /// The process this state belongs to. A child that inherited it without going through the library's atfork
    /// handler (raw `clone`) must not write into the parent's file.
    pid: u32,
    pub sink: Option<TraceSink>,
    /// The lines gathered for the next write.
    pub buf: Vec<u8>,
    /// No more output: the exit flush was written, the budget is spent, or writing failed.
    done: bool,
}

impl Default for TraceOut {
    fn default() -> Self {
        Self::new()
    }
}

impl TraceOut {
    pub fn new() -> TraceOut {
        TraceOut { pid: std::process::id(), sink: None, buf: Vec::with_capacity(WRITE_CHUNK), done: false }
    }

    /// The process the trace belongs to.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether this process may still write the trace: it is not finished, and it is this process's.
    pub fn writable(&self) -> bool {
        !self.done && self.pid == std::process::id()
    }

    /// Writes the gathered lines within the budget, beside the crash handler, and tells the handler how much the
    /// file holds: when they do not all fit, the whole lines that do, then the `truncated` record, and the writer
    /// stops ([`Stop::Budget`]).
    pub fn write_out(&mut self) -> Result<(), Stop> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let sink = self.sink.as_mut().ok_or_else(|| io::Error::other("trace file not open"))?;
        let result = sink.write_lines_beside(&self.buf, &crash::Handler);
        crash::flushed(sink.written());
        self.buf.clear();
        result
    }

    /// The end of every flush: a flush of `kind` gave `result`; whether the writer goes on. The exit flush
    /// finishes the trace; a flush that stopped it ([`stopped`]) finishes it too, and `report` says why (counting
    /// goes on, it costs nothing worth saving, so that a child forked later starts its own trace with its own
    /// budget).
    pub fn settle(&mut self, kind: Flush, result: Result<(), Stop>, report: &StopReport) -> bool {
        match result {
            Ok(()) => {
                self.done = kind == Flush::Exit;
                !self.done
            }
            Err(stop) => {
                self.done = true;
                match stopped(&mut self.sink, stop) {
                    None => {
                        let (max_bytes, rotate) = (report.budget)();
                        (report.note)(format_args!("{}", budget_note(max_bytes, rotate)))
                    }
                    Some(e) => (report.disable)(format_args!(
                        "cannot write the trace ({e}); {}, the program continues",
                        report.disabled
                    )),
                }
                false
            }
        }
    }
}

/// The final flush at process exit: a `.fini_array` destructor (it runs after the program's `atexit` handlers and
/// destructors) that, while `$running()`, runs `$flush_exit()` with no panic escaping into the exiting program.
/// Not in unit-test builds, whose process is the test harness.
#[macro_export]
macro_rules! flush_at_exit {
    ($running:expr, $flush_exit:expr) => {
        #[cfg(not(test))]
        #[used]
        #[link_section = ".fini_array"]
        static FLUSH_AT_EXIT: extern "C" fn() = flush_at_exit;

        #[cfg_attr(test, allow(dead_code))]
        extern "C" fn flush_at_exit() {
            let _ = std::panic::catch_unwind(|| {
                if $running() {
                    $flush_exit();
                }
            });
        }
    };
}

/// What the writer thread runs.
#[derive(Clone, Copy, Debug)]
pub struct WriterLoop {
    /// Milliseconds between windows; 0: no periodic windows (the thread then only serves the crash handler).
    pub interval_ms: u64,
    /// Run first on the thread (after the crash handler's channel is set up).
    pub on_start: fn(),
    /// Whether the library still observes; the thread ends when it does not.
    pub running: fn() -> bool,
    /// Writes a window (`periodic`: the interval's, not only a crash handler's request); whether the writer goes on.
    pub flush: fn(periodic: bool) -> bool,
}

/// Starts the writer thread `name`; whether it started. Every signal is blocked on it: the program's handlers never
/// run on the library's thread (a Go runtime, for one, expects signals on its own threads).
pub fn spawn(name: &str, what: WriterLoop) -> bool {
    // The thread inherits the creating thread's signal mask: block everything around the spawn.
    // SAFETY: sigset_t is plain data initialised by sigfillset/pthread_sigmask before use.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers; only this thread's mask changes, and it is restored below.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
    }
    crash::writer_thread_expected();
    let spawned = std::thread::Builder::new().name(name.into()).stack_size(256 * 1024).spawn(move || run(what));
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) };
    if spawned.is_err() {
        crash::writer_thread_ended();
    }
    spawned.is_ok()
}

fn run(what: WriterLoop) {
    // First the crash handler's channel (a crash may come at once), then `on_start`.
    // SAFETY: eventfd has no memory preconditions; failure leaves the crash handler without flushes.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd >= 0 {
        crash::writer_thread_started(efd);
    } else {
        crash::writer_thread_ended();
    }
    (what.on_start)();
    let interval = (what.interval_ms > 0).then(|| what.interval_ms.saturating_mul(1_000_000));
    let mut next = interval.map(|i| now_ns().saturating_add(i));
    loop {
        let survival = crash::survival_deadline();
        let deadline = match (next, survival) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let requested = wait(efd, deadline);
        let request = crash::pending_request();
        if !(what.running)() {
            break;
        }
        let now = now_ns();
        let periodic = next.is_some_and(|n| now >= n);
        let survived = survival.is_some_and(|s| now >= s);
        if !requested && !periodic && !survived {
            continue;
        }
        if let (true, Some(i)) = (periodic, interval) {
            // Fixed cadence; after a stall, restart from now rather than catching up.
            next = next.map(|n| n.saturating_add(i).max(now.saturating_add(1)));
        }
        let open = (what.flush)(periodic);
        crash::request_served(request);
        if !open {
            break;
        }
    }
    crash::writer_thread_ended();
    if efd >= 0 {
        // SAFETY: closes the eventfd created above, which the handler no longer uses (writer_thread_ended).
        unsafe { libc::close(efd) };
    }
}

/// Waits until `deadline` (CLOCK_MONOTONIC ns; `None`: no deadline) or a request on `efd`; whether a request came.
fn wait(efd: libc::c_int, deadline: Option<u64>) -> bool {
    let timeout = deadline.map(|d| {
        let ns = d.saturating_sub(now_ns());
        libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
    });
    if efd < 0 {
        match timeout {
            Some(t) => std::thread::sleep(std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)),
            None => std::thread::park(),
        }
        return false;
    }
    let mut poll = libc::pollfd { fd: efd, events: libc::POLLIN, revents: 0 };
    let timeout_ptr = timeout.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: one valid pollfd; a null timeout waits without limit; no signal mask change.
    let ready = unsafe { libc::ppoll(&mut poll, 1, timeout_ptr, std::ptr::null()) };
    if ready <= 0 || poll.revents & libc::POLLIN == 0 {
        return false;
    }
    let mut count = 0u64;
    // SAFETY: an 8-byte read from a non-blocking eventfd resets its counter.
    unsafe { libc::read(efd, (&mut count as *mut u64).cast(), 8) };
    true
}

/// A trace stopped before its process: for a failed write, the `truncated` record (beside the crash handler, which
/// is finished first) and the error to report; for a spent budget (the record is written already), `None`. The
/// sink is closed either way.
fn stopped(sink: &mut Option<TraceSink>, stop: Stop) -> Option<io::Error> {
    let failed = match stop {
        Stop::Budget => None,
        Stop::Failed(e) => {
            if let Some(sink) = sink.as_mut() {
                sink.record_write_error_beside(&e, &crash::Handler);
            }
            crash::finish_exclusive();
            Some(e)
        }
    };
    *sink = None;
    failed
}

/// The line an observer prints when its trace of budget `max_bytes`, asked to rotate through `rotate` segments,
/// stopped at the budget.
fn budget_note(max_bytes: u64, rotate: u32) -> String {
    match crate::sink::rotation_plan(max_bytes, rotate) {
        Some((keep, segment)) => format!(
            "a record did not fit one of the trace's {keep} segments of {segment} bytes (BACKSCOPE_TRACE_MAX_BYTES \
             {max_bytes} over BACKSCOPE_TRACE_ROTATE) and the trace was cut; the program continues"
        ),
        None => format!(
            "the trace reached its budget of {max_bytes} bytes (BACKSCOPE_TRACE_MAX_BYTES) and was cut; the program \
             continues"
        ),
    }
}

/// Per kernel, the shape counts at the last window, to write the next window's deltas. `K` is what tells shapes
/// apart (grid and block for CUDA/HIP, the workgroup count for a Vulkan pipeline); `N` entries per kernel.
#[derive(Debug, Default)]
pub struct ShapeDeltas<K, const N: usize> {
    last: HashMap<u32, ([u64; N], u64)>,
    merged: Vec<(K, u64)>,
}

impl<K: Copy + PartialEq, const N: usize> ShapeDeltas<K, N> {
    pub fn new() -> Self {
        ShapeDeltas { last: HashMap::new(), merged: Vec::new() }
    }

    /// The deltas of kernel `id` whose counts are now `entries` (each distinct shape's count, `None` for unused
    /// entries) and `other` (all further shapes): each shape that grew, once, with its growth, to `emit`; the
    /// growth of `other`, if any, is returned. Two threads racing on a new shape can claim two entries for it:
    /// they are merged.
    pub fn take(
        &mut self,
        id: u32,
        entries: &[Option<(K, u64)>; N],
        other: u64,
        mut emit: impl FnMut(K, u64),
    ) -> Option<u64> {
        let (last_entries, last_other) = self.last.entry(id).or_insert(([0; N], 0));
        self.merged.clear();
        for (entry, last) in entries.iter().zip(last_entries.iter_mut()) {
            let Some((shape, n)) = *entry else { continue };
            let delta = n.wrapping_sub(*last);
            *last = n;
            if delta == 0 {
                continue;
            }
            match self.merged.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, m)) => *m += delta,
                None => self.merged.push((shape, delta)),
            }
        }
        self.merged.iter().for_each(|&(shape, n)| emit(shape, n));
        if other == *last_other {
            return None;
        }
        let delta = other.wrapping_sub(*last_other);
        *last_other = other;
        Some(delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_are_growth_since_the_last_window_with_racing_entries_merged() {
        let mut d: ShapeDeltas<[u32; 3], 3> = ShapeDeltas::new();
        let mut got = Vec::new();
        let other = d.take(7, &[Some(([1, 1, 1], 5)), Some(([2, 1, 1], 2)), None], 0, |s, n| got.push((s, n)));
        assert_eq!((got.clone(), other), (vec![([1, 1, 1], 5), ([2, 1, 1], 2)], None));
        got.clear();
        // The same shape in two entries (a race at its first count): one delta; `other` grew by 4.
        let other =
            d.take(7, &[Some(([1, 1, 1], 6)), Some(([2, 1, 1], 2)), Some(([1, 1, 1], 3))], 4, |s, n| got.push((s, n)));
        assert_eq!((got.clone(), other), (vec![([1, 1, 1], 4)], Some(4)));
        got.clear();
        assert_eq!(
            d.take(7, &[Some(([1, 1, 1], 6)), Some(([2, 1, 1], 2)), Some(([1, 1, 1], 3))], 4, |s, n| got.push((s, n))),
            None
        );
        assert!(got.is_empty(), "nothing changed: nothing to write");
        d.take(8, &[Some(([9, 9, 9], 1)), None, None], 0, |s, n| got.push((s, n)));
        assert_eq!(got, [([9, 9, 9], 1)], "kernels are apart");
    }
}
