//! The crash-handler runtime both observer libraries share: on SIGSEGV, SIGBUS, SIGABRT or SIGILL the library
//! writes a `crash` record into its trace (what it is, the library's [`CrashHooks::record`] says), then hands the
//! signal on, so that the program's own crash report still appears and its exit status is the one it would have
//! without the library. Each cdylib that links this crate has its own copy of this state and its own handler.
//!
//! The handler, async-signal-safe throughout (no allocation, no lock, `write(2)` from static buffers):
//! 1. asks the writer thread to write the open window (an `eventfd` write, [`writer_thread_started`]) and waits for
//!    it, at most [`FLUSH_WAIT_MS`]: the writer allocates and locks, which the handler must not, and if the crash
//!    left a lock held the wait just ends;
//! 2. writes the record with one `write` to a duplicate of the trace file's descriptor ([`file_opened`]), or, when
//!    the writer has not opened the file, to the file [`CrashHooks::create_file`] creates;
//! 3. chains to what was installed before: the default action is restored and the signal raised again (it is
//!    blocked, so it arrives as the handler returns); an ignored signal stays ignored; a handler function is called
//!    with the same arguments.
//!
//! Only one thread writes at a time; a second crashing thread waits for it (bounded) and chains. At most
//! [`MAX_RECORDS`] crash records are written per process. Nothing is written once the writer wrote the trace's last
//! record (`end` or `truncated`, [`finish_exclusive`]).
//!
//! A rotating trace moves to its next segment ([`begin_switch`], [`switched`]): the handler writes nothing into a
//! segment once the writer is about to end it with its `rotated` record (the writer waits for a record being
//! written), and a record that comes during the switch waits for the next segment, at most [`SWITCH_WAIT_MS`]. The
//! one record lost is that of a signal taken by the switching thread itself during the switch (the writes of the
//! `rotated` record, the next header and the definitions), which cannot wait for itself.
//!
//! A handler that returns does not tell whether the program survives (Go's returns both for a fault in Go code and
//! for one in C code); [`survived_signal`] says when the process outlived a returned handler by [`SURVIVAL_NS`].

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

use crate::clock::now_ns;
use crate::json::FixedBuf;
use crate::record::Crash;
use crate::runtime::gettid;
use crate::sink::CoWriter;

/// The signals a crash record is written for.
pub const SIGNALS: [c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT, libc::SIGILL];
/// How long the process must outlive a returned handler for its crash record to be marked as survived.
pub const SURVIVAL_NS: u64 = 2_000_000_000;
/// Longest wait for the writer thread's flush.
pub const FLUSH_WAIT_MS: u64 = 1000;
/// Longest wait of a second crashing thread for the first to finish its record.
pub const OTHER_CRASH_WAIT_MS: u64 = 2000;
/// Longest wait of a crash record for a rotating trace's switch to its next segment.
pub const SWITCH_WAIT_MS: u64 = 2000;
/// Crash records per process (a program that recovers from signals in a loop must not fill the disk).
pub const MAX_RECORDS: u32 = 8;
/// Room for one crash record and what it needs first (kernel definitions).
pub const RECORD_BUFFER: usize = 64 * 1024;

/// The buffer a record is written into.
pub type RecordBuf = FixedBuf<RECORD_BUFFER>;

/// Creates the trace file when the writer has not: its descriptor and the header's length.
pub type CreateFile = fn() -> Option<(c_int, u64)>;

/// What the library adds to the shared handler.
#[derive(Clone, Copy, Debug)]
pub struct CrashHooks {
    /// Whether the library observes now (only then is a flush request worth making).
    pub observing: fn() -> bool,
    /// Creates the trace file when the writer has not, header written, and says its descriptor and the header's
    /// length; `None` when it cannot, or when the library leaves no trace without its writer.
    pub create_file: Option<CreateFile>,
    /// Writes the record of `crash` (its `threads` empty: the library lists them) into `out`, in at most `budget`
    /// bytes; whether it fits. Called by one thread at a time (the one holding the handler), from the handler.
    pub record: fn(crash: &Crash<'_>, budget: u64, out: &mut RecordBuf) -> bool,
}

/// `TRACE_FD` before the trace file exists.
const NO_FILE: i32 = -1;
/// `TRACE_FD` once nothing more may be written.
const FINISHED: i32 = -2;
/// `TRACE_FD` while a rotating trace switches to its next segment.
const SWITCHING: i32 = -3;

/// Duplicate of the trace file's descriptor for the handler.
static TRACE_FD: AtomicI32 = AtomicI32::new(NO_FILE);
/// Bytes the handler wrote (the writer counts them against the budget), bytes the writer wrote, and the budget.
static EXTRA_WRITTEN: AtomicU64 = AtomicU64::new(0);
static WRITTEN: AtomicU64 = AtomicU64::new(0);
static MAX_BYTES: AtomicU64 = AtomicU64::new(0);
/// The writer thread's request `eventfd` and its thread id; -1 and 0 without one.
static FLUSH_FD: AtomicI32 = AtomicI32::new(-1);
/// A writer thread was spawned and has not ended (it may not have set up `FLUSH_FD` yet).
static WRITER_EXPECTED: AtomicBool = AtomicBool::new(false);
static WRITER_TID: AtomicU32 = AtomicU32::new(0);
/// Flush requests made, and the last one the writer served.
static REQUESTED: AtomicU64 = AtomicU64::new(0);
static SERVED: AtomicU64 = AtomicU64::new(0);
/// Thread id of the thread writing a crash record now; 0 when none.
static HANDLING: AtomicU32 = AtomicU32::new(0);
/// Thread id of the handler's thread while it uses `TRACE_FD`'s descriptor (from reading it until its record is
/// written), and of the writer's thread while it switches segments; 0 when none. `WRITING` and `TRACE_FD` are
/// stored and read in sequentially consistent order on both sides, so that either the handler sees the switch, or
/// the writer sees the handler and waits for it.
static WRITING: AtomicU32 = AtomicU32::new(0);
static SWITCHER: AtomicU32 = AtomicU32::new(0);
/// Crash records written.
static SEQ: AtomicU32 = AtomicU32::new(0);
/// The crash record after which the program's handler returned (0: none pending), and when.
static RETURNED_SEQ: AtomicU32 = AtomicU32::new(0);
static RETURNED_AT: AtomicU64 = AtomicU64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Data written once before the handler is installed and only read afterwards (the installing `sigaction` call
/// orders the writes before any delivery).
struct SetOnce<T>(UnsafeCell<T>);

// SAFETY: written only by the installing thread before the handler that reads it exists (`INSTALLED` admits one
// installer); read-only afterwards.
unsafe impl<T> Sync for SetOnce<T> {}

/// Data only the thread holding `HANDLING` touches.
struct HandlerOnly<T>(UnsafeCell<T>);

// SAFETY: `HANDLING` (a compare-exchange from 0 to the thread id) admits one thread at a time.
unsafe impl<T> Sync for HandlerOnly<T> {}

static PREVIOUS: SetOnce<[libc::sigaction; 4]> =
    // SAFETY: sigaction is plain data; all zeroes is SIG_DFL with no flags.
    SetOnce(UnsafeCell::new(unsafe { std::mem::zeroed() }));
static HOOKS: SetOnce<Option<CrashHooks>> = SetOnce(UnsafeCell::new(None));
static RECORD: HandlerOnly<RecordBuf> = HandlerOnly(UnsafeCell::new(FixedBuf::new()));

// ---- What the writer tells the handler ----

/// The writer opened the trace file (budget `max_bytes`, 0: none): keep a duplicate of its descriptor.
pub fn file_opened(fd: c_int, max_bytes: u64) {
    // SAFETY: duplicates a descriptor the writer just opened (close-on-exec, kept for the process image).
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup >= 0 {
        MAX_BYTES.store(max_bytes, Ordering::Release);
        TRACE_FD.store(dup, Ordering::Release);
    }
}

/// The budget of a trace file the handler creates itself.
pub fn set_budget(max_bytes: u64) {
    MAX_BYTES.store(max_bytes, Ordering::Release);
}

/// After a write: the bytes the writer has written.
pub fn flushed(written: u64) {
    WRITTEN.store(written, Ordering::Release);
}

/// The trace is finished (writing failed, or observation stopped): the handler writes nothing more.
pub fn writer_finished() {
    TRACE_FD.store(FINISHED, Ordering::Release);
}

/// The writer is about to write the last record (end or truncated): from now on the handler writes nothing, and a
/// record it is writing now is finished first (waiting at most [`OTHER_CRASH_WAIT_MS`]).
pub fn finish_exclusive() {
    TRACE_FD.store(FINISHED, Ordering::Release);
    let me = gettid();
    wait_until(OTHER_CRASH_WAIT_MS, || {
        matches!(HANDLING.load(Ordering::Acquire), 0) || HANDLING.load(Ordering::Acquire) == me
    });
}

/// A rotating trace's segment is about to end with its `rotated` record: from now on the handler writes nothing into
/// it (a record written now is finished first, waiting at most [`OTHER_CRASH_WAIT_MS`]), and a record that comes
/// before [`switched`] waits for the next segment.
pub fn begin_switch() {
    let me = gettid();
    SWITCHER.store(me, Ordering::SeqCst);
    let mut fd = TRACE_FD.load(Ordering::SeqCst);
    loop {
        if fd < 0 {
            // No descriptor (none was duplicated, or the trace is finished): nothing to move.
            SWITCHER.store(0, Ordering::SeqCst);
            return;
        }
        match TRACE_FD.compare_exchange(fd, SWITCHING, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => break,
            Err(now) => fd = now,
        }
    }
    let idle = wait_until(OTHER_CRASH_WAIT_MS, || {
        matches!(WRITING.load(Ordering::SeqCst), 0) || WRITING.load(Ordering::SeqCst) == me
    });
    if idle {
        // SAFETY: the duplicate made for the handler, which no handler uses any more (none is writing, and a later
        // one reads SWITCHING). A handler still writing after the wait keeps it: leaked rather than closed under it.
        unsafe { libc::close(fd) };
    }
}

/// The next segment is open at `fd` with a budget of `max_bytes`, its header and definitions written (`written`
/// bytes): the handler writes there from now on. Nothing changes unless [`begin_switch`] paused the handler.
pub fn switched(fd: c_int, max_bytes: u64, written: u64) {
    if TRACE_FD.load(Ordering::SeqCst) == SWITCHING {
        // SAFETY: duplicates the descriptor the writer just opened, as `file_opened` does.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        EXTRA_WRITTEN.store(0, Ordering::SeqCst);
        WRITTEN.store(written, Ordering::SeqCst);
        MAX_BYTES.store(max_bytes, Ordering::SeqCst);
        let next = if dup >= 0 { dup } else { FINISHED };
        if TRACE_FD.compare_exchange(SWITCHING, next, Ordering::SeqCst, Ordering::SeqCst).is_err() && dup >= 0 {
            // SAFETY: the duplicate made above, never published.
            unsafe { libc::close(dup) };
        }
    }
    SWITCHER.store(0, Ordering::SeqCst);
}

/// Bytes the handler added to the file.
pub fn extra_written() -> u64 {
    EXTRA_WRITTEN.load(Ordering::Acquire)
}

/// The handler as the trace file's second writer, for [`crate::sink::TraceSink::write_lines_beside`].
#[derive(Clone, Copy, Debug)]
pub struct Handler;

impl CoWriter for Handler {
    fn written(&self) -> u64 {
        extra_written()
    }
    fn finish(&self) {
        finish_exclusive();
        SWITCHER.store(0, Ordering::SeqCst);
    }
    fn pause(&self) {
        begin_switch();
    }
    fn resume(&self, fd: std::os::fd::RawFd, max_bytes: u64, written: u64) {
        switched(fd, max_bytes, written);
    }
}

/// A writer thread is about to be spawned: a crash before it is ready waits for it.
pub fn writer_thread_expected() {
    WRITER_EXPECTED.store(true, Ordering::Release);
}

/// The writer thread waits on `efd` for flush requests.
pub fn writer_thread_started(efd: c_int) {
    WRITER_TID.store(gettid(), Ordering::Release);
    FLUSH_FD.store(efd, Ordering::Release);
}

pub fn writer_thread_ended() {
    WRITER_EXPECTED.store(false, Ordering::Release);
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

/// When the writer thread must look again whether the process outlived a returned handler.
pub fn survival_deadline() -> Option<u64> {
    (RETURNED_SEQ.load(Ordering::Acquire) != 0).then(|| RETURNED_AT.load(Ordering::Acquire).saturating_add(SURVIVAL_NS))
}

/// The crash record the process has outlived by [`SURVIVAL_NS`] since the program's handler returned from it, and
/// now; taken once (the writer writes its `signal_returned` record).
pub fn survived_signal() -> Option<(u32, u64)> {
    let seq = RETURNED_SEQ.load(Ordering::Acquire);
    let now = now_ns();
    if seq == 0 || now < RETURNED_AT.load(Ordering::Acquire).saturating_add(SURVIVAL_NS) {
        return None;
    }
    RETURNED_SEQ.compare_exchange(seq, 0, Ordering::AcqRel, Ordering::Relaxed).ok().map(|_| (seq, now))
}

/// In a forked child: the parent's file, writer thread and records are not the child's. With `child_traces` the
/// child may write its own trace (a crash before its writer opens one creates it); without, it writes none.
pub fn reset_in_child(child_traces: bool) {
    let fd = TRACE_FD.swap(if child_traces { NO_FILE } else { FINISHED }, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: closes the child's copy of the duplicate made in `file_opened`; the parent keeps its own.
        unsafe { libc::close(fd) };
    }
    let efd = FLUSH_FD.swap(-1, Ordering::AcqRel);
    if efd >= 0 {
        // SAFETY: the child's copy of the parent writer thread's eventfd, which no thread here waits on.
        unsafe { libc::close(efd) };
    }
    WRITER_TID.store(0, Ordering::Relaxed);
    WRITER_EXPECTED.store(false, Ordering::Relaxed);
    for counter in [&EXTRA_WRITTEN, &WRITTEN, &REQUESTED, &SERVED] {
        counter.store(0, Ordering::Relaxed);
    }
    HANDLING.store(0, Ordering::Relaxed);
    WRITING.store(0, Ordering::Relaxed);
    SWITCHER.store(0, Ordering::Relaxed);
    SEQ.store(0, Ordering::Relaxed);
    RETURNED_SEQ.store(0, Ordering::Relaxed);
}

// ---- Installing the handler ----

/// Installs the handler for [`SIGNALS`] with the library's `hooks`, once per process image; whether this call did.
pub fn install(hooks: CrashHooks) -> bool {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return false;
    }
    // SAFETY: `INSTALLED` admits this thread alone, and no handler that reads HOOKS or PREVIOUS is installed yet.
    let (slot, previous) = unsafe { (&mut *HOOKS.0.get(), &mut *PREVIOUS.0.get()) };
    *slot = Some(hooks);
    for (signal, previous) in SIGNALS.iter().zip(previous.iter_mut()) {
        // SAFETY: sigaction is plain data; it is filled in before use.
        let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
        ours.sa_sigaction = on_signal as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize;
        // SA_ONSTACK: on an alternate signal stack where the thread has one (Go requires it of every handler, and a
        // stack overflow needs it); every signal blocked while the handler runs, as Go's own handlers have it, so
        // that a handler chained to sees at least the mask the kernel would have given it.
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        // SAFETY: valid pointers; `previous` receives the handler in place now, which `on_signal` chains to.
        unsafe {
            libc::sigfillset(&mut ours.sa_mask);
            libc::sigaction(*signal, &ours, previous);
        }
    }
    true
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
    let tid = gettid();
    let mut seq = 0;
    // A sent signal that the program ignores changes nothing: no record.
    if !(sent && previous.sa_sigaction == libc::SIG_IGN) {
        match HANDLING.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                seq = write_record(signal, code, addr, sent.then_some(sender), tid);
                HANDLING.store(0, Ordering::Release);
            }
            // This thread faulted while writing its record: only chain.
            Err(owner) if owner == tid => {}
            // Another thread is writing: let it finish, since chaining may end the process.
            Err(_) => {
                wait_until(OTHER_CRASH_WAIT_MS, || HANDLING.load(Ordering::Acquire) == 0);
            }
        }
    }
    chain(signal, previous, info, context, tid, seq);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Hands the signal to what was installed before the library.
fn chain(
    signal: c_int,
    previous: &libc::sigaction,
    info: *mut libc::siginfo_t,
    context: *mut c_void,
    tid: u32,
    seq: u32,
) {
    match previous.sa_sigaction {
        libc::SIG_DFL => {
            // The default action, for this very signal: blocked while the handler runs, it arrives (and takes the
            // process down) as the handler returns; a fault would recur too.
            // SAFETY: restores the disposition saved at installation and re-sends the signal to this thread.
            unsafe {
                libc::sigaction(signal, previous, std::ptr::null_mut());
                libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, signal);
            }
        }
        libc::SIG_IGN => {
            // A fault recurs as the handler returns, and the kernel then forces the default action, as it would
            // have without the library.
            // SAFETY: restores the disposition saved at installation.
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
                // SAFETY: the program installed this function as an SA_SIGINFO handler for `signal`; it gets the
                // arguments the kernel gave this handler.
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(signal, info, context);
            } else {
                // SAFETY: the program installed this function as a plain handler for `signal`.
                let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
                f(signal);
            }
            if seq > 0 {
                RETURNED_AT.store(now_ns(), Ordering::Release);
                RETURNED_SEQ.store(seq, Ordering::Release);
            }
        }
    }
}

/// Waits, polling every millisecond with `nanosleep` (async-signal-safe), until `done` or `ms` passed.
pub fn wait_until(ms: u64, done: impl Fn() -> bool) -> bool {
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
fn flush_open_window(hooks: &CrashHooks, tid: u32) -> bool {
    if !(hooks.observing)() {
        return false;
    }
    // A crash right after the library started may come before its writer thread is ready.
    wait_until(FLUSH_WAIT_MS, || FLUSH_FD.load(Ordering::Acquire) >= 0 || !WRITER_EXPECTED.load(Ordering::Acquire));
    let efd = FLUSH_FD.load(Ordering::Acquire);
    if efd < 0 || WRITER_TID.load(Ordering::Acquire) == tid {
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

/// Writes the crash record (and what it needs first); its sequence number, or 0 if nothing was written.
fn write_record(signal: c_int, code: c_int, addr: u64, sender: Option<u32>, tid: u32) -> u32 {
    // SAFETY: written before this handler was installed, read-only since.
    let Some(hooks) = (unsafe { &*HOOKS.0.get() }) else { return 0 };
    if SEQ.load(Ordering::Relaxed) >= MAX_RECORDS || TRACE_FD.load(Ordering::Acquire) == FINISHED {
        return 0;
    }
    let flushed = flush_open_window(hooks, tid);
    let _writing = Writing(tid);
    let fd = match claim_file(tid) {
        FINISHED | SWITCHING => return 0,
        NO_FILE => match hooks.create_file.and_then(|create| create()) {
            Some((fd, header)) => {
                WRITTEN.store(header, Ordering::Release);
                TRACE_FD.store(fd, Ordering::Release);
                fd
            }
            None => return 0,
        },
        fd => fd,
    };
    let seq = SEQ.fetch_add(1, Ordering::AcqRel) + 1;
    let crash = Crash { seq, signal, code, addr, sender_pid: sender, at_ns: now_ns(), tid, flushed, threads: &[] };
    // SAFETY: this thread holds HANDLING, which admits one thread to the buffer.
    let out = unsafe { &mut *RECORD.0.get() };
    out.clear();
    if !(hooks.record)(&crash, room_in_budget(), out) || out.overflowed() {
        return 0;
    }
    if write_all(fd, out.as_bytes()) {
        EXTRA_WRITTEN.fetch_add(out.len() as u64, Ordering::AcqRel);
        return seq;
    }
    0
}

/// Marks the handler's thread as using the trace's descriptor until dropped (see `WRITING`).
struct Writing(u32);

impl Drop for Writing {
    fn drop(&mut self) {
        let _ = WRITING.compare_exchange(self.0, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// `TRACE_FD` for a record of thread `tid`, which `WRITING` then names: during a rotating trace's switch, the next
/// segment's, waiting for it at most [`SWITCH_WAIT_MS`] (a switch after the wait is waited for once more);
/// `SWITCHING` when the switch did not end (or `tid` is the switching thread, which cannot wait for itself).
fn claim_file(tid: u32) -> i32 {
    for _ in 0..2 {
        WRITING.store(tid, Ordering::SeqCst);
        let fd = TRACE_FD.load(Ordering::SeqCst);
        if fd != SWITCHING {
            return fd;
        }
        WRITING.store(0, Ordering::SeqCst);
        if SWITCHER.load(Ordering::SeqCst) == tid
            || !wait_until(SWITCH_WAIT_MS, || TRACE_FD.load(Ordering::SeqCst) != SWITCHING)
        {
            return SWITCHING;
        }
    }
    SWITCHING
}

/// Bytes the budget still allows (the writer's `truncated` record keeps its reserve).
fn room_in_budget() -> u64 {
    let max_bytes = MAX_BYTES.load(Ordering::Acquire);
    if max_bytes == 0 {
        return u64::MAX;
    }
    let used = WRITTEN.load(Ordering::Acquire) + EXTRA_WRITTEN.load(Ordering::Acquire);
    max_bytes.saturating_sub(crate::sink::CUT_RECORD_RESERVE).saturating_sub(used)
}

/// Writes `bytes` whole to `fd` (async-signal-safe); whether it did.
pub fn write_all(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice to a descriptor the caller owns.
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
    use std::sync::atomic::AtomicUsize;

    static PROGRAM_HANDLER_RAN: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn program_handler(_: c_int) {
        PROGRAM_HANDLER_RAN.fetch_add(1, Ordering::SeqCst);
    }

    fn record(crash: &Crash<'_>, budget: u64, out: &mut RecordBuf) -> bool {
        crate::record::crash(out, crash);
        out.len() as u64 <= budget
    }

    #[test]
    fn a_signal_gets_its_record_then_the_programs_handler_and_a_returned_handler_is_survived_later() {
        // The program's own handler first (as a Go runtime's would be), then ours over it.
        // SAFETY: installs a plain handler for SIGABRT in this test process; nothing else here raises it.
        unsafe { libc::signal(libc::SIGABRT, program_handler as extern "C" fn(c_int) as libc::sighandler_t) };
        assert!(install(CrashHooks { observing: || false, create_file: None, record }));
        assert!(!install(CrashHooks { observing: || false, create_file: None, record }), "once per image");
        let path = std::env::temp_dir().join(format!("crash-runtime-{}.jsonl", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        file_opened(std::os::fd::AsRawFd::as_raw_fd(&file), 0);
        // SAFETY: raises SIGABRT on this thread; both handlers return.
        unsafe { libc::raise(libc::SIGABRT) };
        assert_eq!(PROGRAM_HANDLER_RAN.load(Ordering::SeqCst), 1, "chained to the program's handler");
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(written.starts_with("{\"crash\":6,") && written.contains("\"seq\":1,"), "{written}");
        assert_eq!(extra_written(), written.len() as u64);
        // The handler returned: survived only once the process has lived on for SURVIVAL_NS.
        assert!(survival_deadline().is_some() && survived_signal().is_none());
        std::thread::sleep(std::time::Duration::from_nanos(SURVIVAL_NS + 50_000_000));
        let (seq, _) = survived_signal().expect("survived");
        assert_eq!(seq, 1);
        assert!(survived_signal().is_none() && survival_deadline().is_none(), "taken once");
        // A rotating trace's switch: a record that comes while the writer switches waits for the next segment.
        let next_path = std::env::temp_dir().join(format!("crash-runtime-{}.s1.jsonl", std::process::id()));
        let next = std::fs::File::create(&next_path).unwrap();
        begin_switch();
        let raiser = std::thread::spawn(|| {
            // SAFETY: as above, from another thread; both handlers return.
            unsafe { libc::raise(libc::SIGABRT) };
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(PROGRAM_HANDLER_RAN.load(Ordering::SeqCst), 1, "the record waits for the switch");
        switched(std::os::fd::AsRawFd::as_raw_fd(&next), 0, 0);
        raiser.join().unwrap();
        assert_eq!(PROGRAM_HANDLER_RAN.load(Ordering::SeqCst), 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), written, "nothing after the switch began");
        let moved = std::fs::read_to_string(&next_path).unwrap();
        assert!(moved.starts_with("{\"crash\":6,") && moved.contains("\"seq\":2,"), "{moved}");
        assert_eq!(extra_written(), moved.len() as u64, "counted from 0 in the next segment");
        // The switching thread's own signal, during its switch, cannot wait for it: no record, the signal goes on.
        begin_switch();
        // SAFETY: as above.
        unsafe { libc::raise(libc::SIGABRT) };
        assert_eq!(PROGRAM_HANDLER_RAN.load(Ordering::SeqCst), 3);
        switched(std::os::fd::AsRawFd::as_raw_fd(&next), 0, 0);
        assert_eq!(std::fs::read_to_string(&next_path).unwrap(), moved);
        std::fs::remove_file(&path).unwrap();
        let (path, written) = (next_path, moved);
        finish_exclusive();
        // SAFETY: as above; the trace is finished, so no record, but the program's handler still runs.
        unsafe { libc::raise(libc::SIGABRT) };
        assert_eq!(PROGRAM_HANDLER_RAN.load(Ordering::SeqCst), 4);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), written, "nothing after the last record");
        std::fs::remove_file(&path).unwrap();
    }
}
