//! The crash record: on SIGSEGV, SIGBUS, SIGABRT or SIGILL the observer writes what was running (the
//! call each thread was inside, its last launches: `crate::locus`) into the trace, then hands the
//! signal on, so that the program's own crash report still appears and its exit status is the one it
//! would have without the observer.
//!
//! When the handler is installed matters:
//! * a program that is not Go gets it when the library loads (if a trace destination is configured),
//!   so that even a process that never touches CUDA or HIP leaves a record;
//! * a Go program gets it at its first launch. Go's runtime saves the handlers installed before it and,
//!   for a fault in C code (cgo), forwards the signal to them instead of reporting it itself, so a
//!   handler installed earlier would hide Go's `[signal SIGSEGV: segmentation violation …]` report and
//!   change the exit status. Installed after Go's, the observer's handler calls Go's, which reports
//!   and exits as it always does. (A Go executable carries a `Go` build-id note, read from memory.)
//!
//! The handler, async-signal-safe throughout:
//! 1. asks the writer thread to write the open window (an `eventfd` write) and waits for it, at most
//!    [`FLUSH_WAIT_MS`]: the writer allocates and locks, which the handler must not, and if the crash
//!    left a lock held the wait just ends;
//! 2. writes the `crash` record with one `write` to a descriptor the writer duplicated when it opened
//!    the trace, from a static buffer (or creates the trace file itself, header first, if none exists);
//!    kernels the writer has not defined yet are defined first;
//! 3. chains to what was installed before: the default action is restored and the signal raised again
//!    (it is blocked, so it arrives as the handler returns); an ignored signal stays ignored; a handler
//!    function is called with the same arguments.
//!
//! A handler that returns does not tell whether the program survives: Go's returns both for a fault in
//! Go code (which becomes a panic the program may recover from) and for one in C code (whose panic
//! then ends the process with Go's report). So the writer thread writes a `signal_returned` record
//! only if the process is still running [`SURVIVAL_NS`] after the program's handler returned.
//!
//! Only one thread writes at a time; a second crashing thread waits for it (bounded) and chains. At
//! most [`MAX_RECORDS`] crash records are written per process.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

use format::clock::now_ns;
use format::json::{FixedBuf, Out};
use format::record::{self, CrashLaunch, CrashThread};

use crate::locus::{self, RING_LAUNCHES};
use crate::registry;
use crate::state::{self, Destination};

/// The signals a crash record is written for.
pub const SIGNALS: [c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT, libc::SIGILL];
/// How long the process must outlive a returned handler for its crash record to be marked as survived.
pub const SURVIVAL_NS: u64 = 2_000_000_000;
/// Longest wait for the writer thread's flush.
pub const FLUSH_WAIT_MS: u64 = 1000;
/// Longest wait of a second crashing thread for the first to finish its record.
const OTHER_CRASH_WAIT_MS: u64 = 2000;
/// Crash records per process (a program that recovers from signals in a loop must not fill the disk).
pub const MAX_RECORDS: u32 = 8;
/// Threads listed in one crash record: the one that received the signal and the most recently active.
pub const MAX_THREADS: usize = 16;
/// Room for one crash record and the kernel definitions it needs.
const RECORD_BUFFER: usize = 64 * 1024;
/// Longest trace path the handler can build.
const PATH_BUFFER: usize = 4096 + 64;

/// `TRACE_FD` before the trace file exists.
const NO_FILE: i32 = -1;
/// `TRACE_FD` once nothing more may be written (the end or truncated record is out, or writing failed).
const FINISHED: i32 = -2;

/// Descriptor of the trace file for the handler: a duplicate the writer made when it opened the file.
static TRACE_FD: AtomicI32 = AtomicI32::new(NO_FILE);
/// Bytes the handler wrote (the writer counts them against the budget).
static EXTRA_WRITTEN: AtomicU64 = AtomicU64::new(0);
/// Bytes the writer wrote.
static WRITTEN: AtomicU64 = AtomicU64::new(0);
/// Kernel slots `1..DEFINED` have their definition in the file.
static DEFINED: AtomicU32 = AtomicU32::new(1);
static OVERFLOW_DEFINED: AtomicBool = AtomicBool::new(false);
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
/// Crash records written.
static SEQ: AtomicU32 = AtomicU32::new(0);
/// The crash record after which the program's handler returned (0: none pending), and when.
static RETURNED_SEQ: AtomicU32 = AtomicU32::new(0);
static RETURNED_AT: AtomicU64 = AtomicU64::new(0);

const UNDECIDED: u8 = 0;
const DEFERRED: u8 = 1;
const ARMING: u8 = 2;
const ARMED: u8 = 3;
const NEVER: u8 = 4;
static ARM: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Data written once before the handler is installed and only read afterwards (the installing
/// `sigaction` call orders the writes before any delivery).
struct SetOnce<T>(UnsafeCell<T>);

// SAFETY: written only by the arming thread before the handler that reads it exists (ARM's
// ARMING state excludes a second writer); read-only afterwards.
unsafe impl<T> Sync for SetOnce<T> {}

/// Data only the thread holding `HANDLING` touches.
struct HandlerOnly<T>(UnsafeCell<T>);

// SAFETY: `HANDLING` (a compare-exchange from 0 to the thread id) admits one thread at a time.
unsafe impl<T> Sync for HandlerOnly<T> {}

/// What the handler needs to create the trace file when the writer has not.
struct Snapshot {
    dir: bool,
    destination: [u8; 4096],
    destination_len: usize,
    interval_ms: u64,
    max_bytes: u64,
}

static SNAPSHOT: SetOnce<Snapshot> = SetOnce(UnsafeCell::new(Snapshot {
    dir: true,
    destination: [0; 4096],
    destination_len: 0,
    interval_ms: 0,
    max_bytes: 0,
}));

static PREVIOUS: SetOnce<[libc::sigaction; 4]> =
    // SAFETY: sigaction is plain data; all zeroes is SIG_DFL with no flags.
    SetOnce(UnsafeCell::new(unsafe { std::mem::zeroed() }));

struct Scratch {
    record: FixedBuf<RECORD_BUFFER>,
    path: FixedBuf<PATH_BUFFER>,
    exe: [u8; 4096],
    cmdline: [u8; 4096],
    launches: [[CrashLaunch; RING_LAUNCHES]; MAX_THREADS],
    /// Rings of other threads with launches, and the window of their newest one.
    others: [Option<(&'static locus::Ring, u64)>; locus::RINGS],
}

static SCRATCH: HandlerOnly<Scratch> = HandlerOnly(UnsafeCell::new(Scratch {
    record: FixedBuf::new(),
    path: FixedBuf::new(),
    exe: [0; 4096],
    cmdline: [0; 4096],
    launches: [[CrashLaunch { kernel: 0, window_t0: 0, grid: [0; 3], block: [0; 3], failed: false }; RING_LAUNCHES];
        MAX_THREADS],
    others: [None; locus::RINGS],
}));

// ---- What the writer tells the handler ----

/// The writer opened the trace file: keep a duplicate of its descriptor for the handler.
pub fn file_opened(fd: c_int) {
    // SAFETY: duplicates a descriptor the writer just opened; the duplicate is close-on-exec and is
    // kept for the life of the process image (closed only in a forked child).
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup >= 0 {
        TRACE_FD.store(dup, Ordering::Release);
    }
}

/// After a flush: what the file holds.
pub fn flushed(defined: u32, overflow_defined: bool, written: u64) {
    DEFINED.store(defined, Ordering::Release);
    OVERFLOW_DEFINED.store(overflow_defined, Ordering::Release);
    WRITTEN.store(written, Ordering::Release);
}

/// The trace is finished (end record, truncated record, or writing failed): the handler writes nothing
/// more, so that no record follows the last one.
pub fn writer_finished() {
    TRACE_FD.store(FINISHED, Ordering::Release);
}

/// The writer is about to write the last record (end or truncated): from now on the handler writes
/// nothing, and a record it is writing now is finished first (waiting at most a few seconds).
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

/// A writer thread is about to be spawned: a crash before it is ready waits for it.
pub fn writer_thread_expected() {
    WRITER_EXPECTED.store(true, Ordering::Release);
}

/// The writer thread waits on `efd` for flush requests.
pub fn writer_thread_started(efd: c_int) {
    WRITER_TID.store(locus::gettid(), Ordering::Release);
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

/// The crash record the process has outlived by [`SURVIVAL_NS`] since the program's handler returned
/// from it, and now; taken once (the writer writes its `signal_returned` record).
pub fn survived_signal() -> Option<(u32, u64)> {
    let seq = RETURNED_SEQ.load(Ordering::Acquire);
    let now = now_ns();
    if seq == 0 || now < RETURNED_AT.load(Ordering::Acquire).saturating_add(SURVIVAL_NS) {
        return None;
    }
    RETURNED_SEQ.compare_exchange(seq, 0, Ordering::AcqRel, Ordering::Relaxed).ok().map(|_| (seq, now))
}

/// In a forked child: the parent's file, writer thread and records are not the child's.
pub fn reset_in_child() {
    let fd = TRACE_FD.swap(NO_FILE, Ordering::AcqRel);
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
    DEFINED.store(1, Ordering::Relaxed);
    OVERFLOW_DEFINED.store(false, Ordering::Relaxed);
    HANDLING.store(0, Ordering::Relaxed);
    SEQ.store(0, Ordering::Relaxed);
    RETURNED_SEQ.store(0, Ordering::Relaxed);
    locus::reset_in_child();
}

// ---- Installing the handler ----

/// Runs [`at_load`] when the library is loaded (a `.init_array` constructor).
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static ARM_AT_LOAD: extern "C" fn() = arm_at_load;

#[cfg_attr(test, allow(dead_code))]
extern "C" fn arm_at_load() {
    let _ = std::panic::catch_unwind(at_load);
}

/// At library load: install the handler now, or at the first launch for a Go program (module docs).
pub fn at_load() {
    if ARM.load(Ordering::Acquire) != UNDECIDED {
        return;
    }
    let Ok(config) = state::Config::from_env() else {
        let _ = ARM.compare_exchange(UNDECIDED, NEVER, Ordering::AcqRel, Ordering::Relaxed);
        return;
    };
    if main_program_is_go() {
        let _ = ARM.compare_exchange(UNDECIDED, DEFERRED, Ordering::AcqRel, Ordering::Relaxed);
    } else {
        arm(&config, UNDECIDED);
    }
}

/// At a launch: install the handler if it was deferred (a Go program, whose runtime is set up by now).
#[inline(always)]
pub fn arm_if_deferred() {
    if ARM.load(Ordering::Relaxed) == DEFERRED {
        arm_deferred();
    }
}

#[cold]
#[inline(never)]
fn arm_deferred() {
    if let Some(config) = state::config() {
        arm(config, DEFERRED);
    }
}

fn arm(config: &state::Config, from: u8) {
    if ARM.compare_exchange(from, ARMING, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return;
    }
    // SAFETY: ARMING admits this thread alone, and no handler that reads SNAPSHOT or PREVIOUS is
    // installed yet.
    let (snapshot, previous) = unsafe { (&mut *SNAPSHOT.0.get(), &mut *PREVIOUS.0.get()) };
    let (dir, destination) = match &config.destination {
        Destination::Dir(dir) => (true, dir.as_bytes()),
        Destination::File(pattern) => (false, pattern.as_bytes()),
    };
    if destination.len() > snapshot.destination.len() {
        ARM.store(NEVER, Ordering::Release);
        return;
    }
    snapshot.dir = dir;
    snapshot.destination[..destination.len()].copy_from_slice(destination);
    snapshot.destination_len = destination.len();
    snapshot.interval_ms = config.interval_ms;
    snapshot.max_bytes = config.max_bytes;
    for (signal, previous) in SIGNALS.iter().zip(previous.iter_mut()) {
        // SAFETY: sigaction is plain data; it is filled in before use.
        let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
        ours.sa_sigaction = on_signal as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize;
        // SA_ONSTACK: on an alternate signal stack where the thread has one (Go requires it of every
        // handler); every signal blocked while the handler runs, as Go's own handlers have it, so that
        // a handler chained to sees at least the mask the kernel would have given it.
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        // SAFETY: valid pointers to a sigset and to sigaction structures; `previous` receives the
        // handler in place now, which `on_signal` chains to.
        unsafe {
            libc::sigfillset(&mut ours.sa_mask);
            libc::sigaction(*signal, &ours, previous);
        }
    }
    ARM.store(ARMED, Ordering::Release);
}

/// Whether the main program is a Go executable: it carries a note owned by `Go` of type 4 (the Go
/// build id), in a `PT_NOTE` segment mapped with it.
fn main_program_is_go() -> bool {
    unsafe extern "C" fn first_object(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: `data` is the `&mut bool` passed below; `info` is valid during the callback and
        // describes the main program (the first object reported).
        let (found, info) = unsafe { (&mut *(data as *mut bool), &*info) };
        for i in 0..usize::from(info.dlpi_phnum) {
            // SAFETY: the loader's program header table of the object has `dlpi_phnum` entries.
            let header = unsafe { &*info.dlpi_phdr.add(i) };
            if header.p_type != libc::PT_NOTE {
                continue;
            }
            let start = (info.dlpi_addr as usize).wrapping_add(header.p_vaddr as usize);
            // SAFETY: a PT_NOTE segment lies inside a loaded, readable segment of the main program.
            let notes = unsafe { std::slice::from_raw_parts(start as *const u8, header.p_memsz as usize) };
            if has_go_build_id(notes, header.p_align.max(4) as usize) {
                *found = true;
            }
        }
        1
    }
    let mut found = false;
    // SAFETY: the callback matches the expected signature and only writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(first_object), &mut found as *mut bool as *mut c_void) };
    found
}

/// Whether the ELF notes in `notes` (fields aligned to `align`) include Go's build id.
fn has_go_build_id(notes: &[u8], align: usize) -> bool {
    let pad = |n: usize| n.div_ceil(align) * align;
    let word = |at: usize| notes.get(at..at + 4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let mut at = 0;
    while let (Some(name_size), Some(desc_size), Some(kind)) = (word(at), word(at + 4), word(at + 8)) {
        let name_at = at + 12;
        // Go's linker writes the owner padded to four bytes: `Go\0\0`, name size 4.
        let name = notes.get(name_at..name_at.saturating_add(name_size)).map(|n| n.split(|&b| b == 0).next());
        if kind == 4 && name == Some(Some(&b"Go"[..])) {
            return true;
        }
        let Some(next) = name_at.checked_add(pad(name_size)).and_then(|n| n.checked_add(pad(desc_size))) else {
            return false;
        };
        if next <= at {
            return false;
        }
        at = next;
    }
    false
}

// ---- The handler ----

extern "C" fn on_signal(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: __errno_location returns this thread's errno; the handler must leave it as it found it.
    let errno = unsafe { *libc::__errno_location() };
    let Some(index) = SIGNALS.iter().position(|&s| s == signal) else { return };
    // SAFETY: written before this handler was installed, read-only since.
    let previous = unsafe { &(*PREVIOUS.0.get())[index] };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; a null one is tolerated.
    let (code, addr, sender) = match unsafe { info.as_ref() } {
        // SAFETY: si_pid is the union member a sent signal (si_code <= 0) fills in, si_addr the one
        // a fault fills in.
        Some(i) if i.si_code <= 0 => (i.si_code, 0, unsafe { i.si_pid() } as u32),
        // SAFETY: as above.
        Some(i) => (i.si_code, unsafe { i.si_addr() } as u64, 0),
        None => (0, 0, 0),
    };
    let sent = code <= 0;
    let tid = locus::gettid();
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

/// Hands the signal to what was installed before the observer.
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
            // The default action, for this very signal: it is blocked while the handler runs, so it
            // arrives, and takes the process down, as the handler returns (a fault would recur too).
            // SAFETY: restores the disposition saved at arming and re-sends the signal to this thread.
            unsafe {
                libc::sigaction(signal, previous, std::ptr::null_mut());
                libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, signal);
            }
        }
        libc::SIG_IGN => {
            // A fault recurs as the handler returns, and the kernel then forces the default action,
            // as it would have without the observer.
            // SAFETY: restores the disposition saved at arming.
            unsafe { libc::sigaction(signal, previous, std::ptr::null_mut()) };
        }
        handler => {
            if previous.sa_flags & libc::SA_RESETHAND != 0 {
                // The kernel would have reset it on delivery.
                // SAFETY: a zeroed sigaction is SIG_DFL; only this signal's disposition changes.
                unsafe {
                    let default: libc::sigaction = std::mem::zeroed();
                    libc::sigaction(signal, &default, std::ptr::null_mut());
                }
            }
            if previous.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the program installed this function as an SA_SIGINFO handler for `signal`;
                // it gets the arguments the kernel gave this handler.
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
    if !state::is_on() {
        return false;
    }
    // A crash right after the observer started may come before its writer thread is ready.
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
    if SEQ.load(Ordering::Relaxed) >= MAX_RECORDS || TRACE_FD.load(Ordering::Acquire) == FINISHED {
        return 0;
    }
    let flushed = flush_open_window(tid);
    // SAFETY: this thread holds HANDLING, which admits one thread to the scratch space.
    let scratch = unsafe { &mut *SCRATCH.0.get() };
    let fd = match TRACE_FD.load(Ordering::Acquire) {
        FINISHED => return 0,
        NO_FILE => match create_trace_file(scratch) {
            Some(fd) => fd,
            None => return 0,
        },
        fd => fd,
    };
    let seq = SEQ.fetch_add(1, Ordering::AcqRel) + 1;
    let at_ns = now_ns();

    // The receiving thread first (with its ring if it has one), then the others that launched, most
    // recently active first.
    let own = locus::claimed().find(|r| r.tid() == tid);
    let mut n_others = 0;
    for ring in locus::claimed().filter(|r| r.tid() != tid && r.recorded() > 0) {
        scratch.others[n_others] = Some((ring, last_window(ring)));
        n_others += 1;
    }
    let others = &mut scratch.others[..n_others];
    others.sort_unstable_by_key(|o| std::cmp::Reverse(o.map_or(0, |(_, t)| t)));
    let mut rings: [Option<&locus::Ring>; MAX_THREADS] = [None; MAX_THREADS];
    rings[0] = own;
    for (slot, other) in rings[1..].iter_mut().zip(others.iter()) {
        *slot = other.map(|(ring, _)| ring);
    }
    let count = 1 + n_others.min(MAX_THREADS - 1);
    let mut lens = [0usize; MAX_THREADS];
    for (i, ring) in rings[..count].iter().enumerate() {
        if let Some(ring) = ring {
            lens[i] = ring.read_launches(&mut scratch.launches[i]);
        }
    }
    let mut threads = [CrashThread { tid, in_flight: None, launches: &[] }; MAX_THREADS];
    for (i, ring) in rings[..count].iter().enumerate() {
        if let Some(ring) = ring {
            threads[i] =
                CrashThread { tid: ring.tid(), in_flight: ring.in_flight(), launches: &scratch.launches[i][..lens[i]] };
        }
    }
    let receiving = [CrashThread { launches: &[], ..threads[0] }];
    let threads = &threads[..count];
    let crash = record::Crash { seq, signal, code, addr, sender_pid: sender, at_ns, tid, flushed, threads };
    // What does not fit gives way: all listed threads, then the receiving one alone, then no launches.
    let budget = room_in_budget();
    let attempts: [&[CrashThread<'_>]; 3] = [threads, &threads[..1], &receiving];
    let record_buf = &mut scratch.record;
    for threads in attempts {
        record_buf.clear();
        define_kernels(record_buf, threads);
        record::crash(record_buf, &record::Crash { threads, ..crash });
        if !record_buf.overflowed() && record_buf.len() as u64 <= budget {
            if write_all(fd, record_buf.as_bytes()) {
                EXTRA_WRITTEN.fetch_add(record_buf.len() as u64, Ordering::AcqRel);
                return seq;
            }
            return 0;
        }
    }
    0
}

/// Start of the window of a ring's newest launch (to order threads by recent activity).
fn last_window(ring: &locus::Ring) -> u64 {
    let mut launches = [CrashLaunch::default(); RING_LAUNCHES];
    let n = ring.read_launches(&mut launches);
    if n == 0 {
        0
    } else {
        launches[n - 1].window_t0
    }
}

/// Bytes the budget still allows (the writer's `truncated` record keeps its reserve).
fn room_in_budget() -> u64 {
    // SAFETY: written before the handler was installed, read-only since.
    let max_bytes = unsafe { (*SNAPSHOT.0.get()).max_bytes };
    if max_bytes == 0 {
        return u64::MAX;
    }
    let used = WRITTEN.load(Ordering::Acquire) + EXTRA_WRITTEN.load(Ordering::Acquire);
    max_bytes.saturating_sub(format::sink::CUT_RECORD_RESERVE).saturating_sub(used)
}

/// Definitions of the kernels `threads` name that the writer has not written.
fn define_kernels(out: &mut impl Out, threads: &[CrashThread<'_>]) {
    let defined = DEFINED.load(Ordering::Acquire);
    let overflow_defined = OVERFLOW_DEFINED.load(Ordering::Acquire);
    let mut written: [u32; MAX_THREADS * RING_LAUNCHES] = [u32::MAX; MAX_THREADS * RING_LAUNCHES];
    let mut n = 0;
    for launch in threads.iter().flat_map(|t| t.launches) {
        let id = launch.kernel;
        let missing = if id == registry::OVERFLOW_SLOT { !overflow_defined } else { id >= defined };
        if !missing || written[..n].contains(&id) {
            continue;
        }
        if let Some(meta) = registry::slot(id).and_then(|s| s.meta()) {
            record::kernel(
                out,
                &record::KernelDef::new(id, meta.name.as_bytes(), meta.api.as_str(), meta.source.as_str()),
            );
            written[n] = id;
            n += 1;
        }
    }
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

/// Creates the trace file as the writer would (the first free name, exclusively) and writes its
/// header; the descriptor, kept for later records, or `None`.
fn create_trace_file(scratch: &mut Scratch) -> Option<c_int> {
    // SAFETY: written before the handler was installed, read-only since.
    let snapshot = unsafe { &*SNAPSHOT.0.get() };
    let destination = &snapshot.destination[..snapshot.destination_len];
    // SAFETY: getpid and getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
    let mut fd = -1;
    for attempt in 0.. {
        scratch.path.clear();
        let more = if snapshot.dir {
            format::naming::dir_candidate(&mut scratch.path, destination, pid, attempt)
        } else {
            format::naming::file_candidate(&mut scratch.path, destination, pid, attempt)
        };
        if !more {
            return None;
        }
        scratch.path.put(b"\0");
        if scratch.path.overflowed() {
            return None;
        }
        let path = scratch.path.as_bytes().as_ptr().cast();
        if !snapshot.dir && attempt == 0 {
            // An existing device or FIFO (`/dev/stderr`) is a sink to append to, as the writer does.
            // SAFETY: stat with a NUL-terminated path into a zeroed stat buffer.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::stat(path, &mut st) } == 0 {
                let kind = st.st_mode & libc::S_IFMT;
                if kind != libc::S_IFREG && kind != libc::S_IFDIR {
                    // SAFETY: opens an existing special file for appending.
                    fd = unsafe { libc::open(path, libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC) };
                    break;
                }
            }
        }
        // SAFETY: creates a new file exclusively at a NUL-terminated path.
        fd = unsafe { libc::open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o644) };
        // SAFETY: reads this thread's errno.
        if fd >= 0 || unsafe { *libc::__errno_location() } != libc::EEXIST {
            break;
        }
    }
    if fd < 0 {
        return None;
    }
    let exe_len = read_link(c"/proc/self/exe", &mut scratch.exe);
    let cmdline_len = read_file(c"/proc/self/cmdline", &mut scratch.cmdline);
    let start_ns = match state::start_ns() {
        0 => now_ns(),
        t => t,
    };
    scratch.record.clear();
    record::header(
        &mut scratch.record,
        &record::Header {
            pid,
            ppid,
            exe: &scratch.exe[..exe_len],
            cmdline: &scratch.cmdline[..cmdline_len],
            start_ns,
            interval_ms: snapshot.interval_ms,
            shape_buckets: registry::SHAPE_BUCKETS as u32,
            max_kernels: registry::max_kernels(),
            max_bytes: snapshot.max_bytes,
            observer: env!("CARGO_PKG_VERSION"),
            writer: crate::writer::WRITER_NAME,
        },
    );
    if scratch.record.overflowed() || !write_all(fd, scratch.record.as_bytes()) {
        // SAFETY: closes the descriptor opened above.
        unsafe { libc::close(fd) };
        return None;
    }
    WRITTEN.store(scratch.record.len() as u64, Ordering::Release);
    TRACE_FD.store(fd, Ordering::Release);
    Some(fd)
}

fn read_link(path: &std::ffi::CStr, out: &mut [u8]) -> usize {
    // SAFETY: readlink writes at most `out.len()` bytes into `out`.
    let n = unsafe { libc::readlink(path.as_ptr(), out.as_mut_ptr().cast(), out.len()) };
    n.max(0) as usize
}

fn read_file(path: &std::ffi::CStr, out: &mut [u8]) -> usize {
    // SAFETY: opens a NUL-terminated path read-only.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return 0;
    }
    let mut len = 0;
    while len < out.len() {
        // SAFETY: reads into the unused tail of `out`.
        let n = unsafe { libc::read(fd, out[len..].as_mut_ptr().cast(), out.len() - len) };
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(name.len() as u32).to_ne_bytes());
        out.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(name);
        out.resize(out.len().div_ceil(4) * 4, 0);
        out.extend_from_slice(desc);
        out.resize(out.len().div_ceil(4) * 4, 0);
        out
    }

    #[test]
    fn the_go_build_id_note_is_recognised_among_others() {
        // The notes of a Go 1.19 cgo executable (readelf -n): GNU build id, ABI tag, then Go's, whose
        // header `readelf -x .note.go.buildid` shows as 04000000 53000000 04000000 476f0000.
        let mut notes = note(b"GNU\0", 3, &[0x4e; 20]);
        notes.extend(note(b"GNU\0", 1, &[0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]));
        assert!(!has_go_build_id(&notes, 4));
        let go = note(b"Go\0\0", 4, &[b'x'; 0x53]);
        assert_eq!(go[..16], [4, 0, 0, 0, 0x53, 0, 0, 0, 4, 0, 0, 0, 0x47, 0x6f, 0, 0]);
        notes.extend(go);
        assert!(has_go_build_id(&notes, 4));
        assert!(!has_go_build_id(&note(b"Gopher\0\0", 4, b"x"), 4), "another owner");
        // Cut or nonsense sizes end the walk without reading out of bounds.
        assert!(!has_go_build_id(&notes[..30], 4));
        let mut huge = 0xffff_fff0u32.to_ne_bytes().to_vec();
        huge.extend_from_slice(&[0; 12]);
        assert!(!has_go_build_id(&huge, 4));
        // This test program is Rust, not Go.
        assert!(!main_program_is_go());
    }
}
