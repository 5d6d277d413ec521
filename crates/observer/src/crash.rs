//! The crash record: on SIGSEGV, SIGBUS, SIGABRT or SIGILL the observer writes what was running (the
//! call each thread was inside, its last launches: `crate::locus`) into the trace, then hands the
//! signal on, so that the program's own crash report still appears and its exit status is the one it
//! would have without the observer. The handler itself (flush request to the writer thread, one
//! record at a time, chaining, the `signal_returned` bookkeeping; async-signal-safe throughout) is
//! the runtime both observer libraries share, `format::crash`; this module says when it is installed
//! and what the observer's record holds.
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
//! The record defines the kernels the writer has not defined yet first; when no trace file exists
//! yet, the handler creates it (header first) as the writer would.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};

use format::clock::now_ns;
use format::crash::{CrashHooks, RecordBuf};
use format::fork::ForkHandlers;
use format::json::{FixedBuf, Out};
use format::record::{self, Crash, CrashLaunch, CrashThread};

use crate::locus::{self, RING_LAUNCHES};
use crate::registry;
use crate::state::{self, Destination};

/// Threads listed in one crash record: the one that received the signal and the most recently active.
pub const MAX_THREADS: usize = 16;
/// Longest trace path the handler can build.
const PATH_BUFFER: usize = 4096 + 64;

/// Kernel slots `1..DEFINED` have their definition in the file.
static DEFINED: AtomicU32 = AtomicU32::new(1);
static OVERFLOW_DEFINED: AtomicBool = AtomicBool::new(false);

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

/// Data only the thread writing a crash record touches.
struct HandlerOnly<T>(UnsafeCell<T>);

// SAFETY: `format::crash` admits one thread at a time to `write_record` and `create_trace_file`.
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

struct Scratch {
    record: FixedBuf<{ format::crash::RECORD_BUFFER }>,
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

/// After a flush: the kernels the file defines (slots `1..defined`, and the overflow kernel).
pub fn kernels_defined(defined: u32, overflow_defined: bool) {
    DEFINED.store(defined, Ordering::Release);
    OVERFLOW_DEFINED.store(overflow_defined, Ordering::Release);
}

/// In a forked child: the parent's file, writer thread and records are not the child's; the child
/// writes its own trace.
pub const FORK: ForkHandlers = ForkHandlers::child(reset_in_child);

fn reset_in_child() {
    format::crash::reset_in_child(true);
    DEFINED.store(1, Ordering::Relaxed);
    OVERFLOW_DEFINED.store(false, Ordering::Relaxed);
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
    // SAFETY: ARMING admits this thread alone, and no handler that reads SNAPSHOT is installed yet.
    let snapshot = unsafe { &mut *SNAPSHOT.0.get() };
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
    format::crash::set_budget(config.max_bytes);
    format::crash::install(CrashHooks {
        observing: state::is_on,
        create_file: Some(create_trace_file),
        record: write_record,
    });
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

/// The crash record of `crash` into `out` (within `budget` bytes): the receiving thread first (with its ring if it
/// has one), then the others that launched, most recently active first, and the definitions of the kernels they
/// name that the writer has not written. What does not fit gives way: all listed threads, then the receiving one
/// alone, then no launches. Called from the signal handler, one thread at a time: allocates nothing, takes no lock.
fn write_record(crash: &Crash<'_>, budget: u64, out: &mut RecordBuf) -> bool {
    let tid = crash.tid;
    // SAFETY: one thread at a time writes a record (`format::crash`'s handling flag).
    let scratch = unsafe { &mut *SCRATCH.0.get() };
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
    let attempts: [&[CrashThread<'_>]; 3] = [threads, &threads[..1], &receiving];
    for threads in attempts {
        out.clear();
        define_kernels(out, threads);
        record::crash(out, &Crash { threads, ..*crash });
        if !out.overflowed() && out.len() as u64 <= budget {
            return true;
        }
    }
    false
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

/// Creates the trace file as the writer would (the first free name, exclusively) and writes its
/// header; the descriptor (kept for later records) and the header's length, or `None`.
fn create_trace_file() -> Option<(c_int, u64)> {
    // SAFETY: called from `format::crash`'s handler by the one thread writing a record.
    let scratch = unsafe { &mut *SCRATCH.0.get() };
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
            writer: format::OBSERVER_WRITER_NAME,
            max_sequences: 0,
            segment: None,
        },
    );
    if scratch.record.overflowed() || !format::crash::write_all(fd, scratch.record.as_bytes()) {
        // SAFETY: closes the descriptor opened above.
        unsafe { libc::close(fd) };
        return None;
    }
    Some((fd, scratch.record.len() as u64))
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
