//! The layer's life cycle: configuration, start, self-disabling, fork.
//!
//! The layer starts with the first `vkCreateInstance` of a process. Without a trace destination it
//! says so once on stderr and only forwards calls. Any internal failure (a panic, the trace file
//! cannot be written) switches observation off for the rest of the process with one line on stderr;
//! hooks keep forwarding every call unchanged.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use format::env::{self, Settings};

use format::spin::SpinLock;

const UNINIT: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static SETTINGS: OnceLock<Settings> = OnceLock::new();
static START_NS: AtomicU64 = AtomicU64::new(0);
static REPORTED: AtomicBool = AtomicBool::new(false);
static STATISTICS_WANTED: AtomicBool = AtomicBool::new(true);
/// Serialises start-up (the first `vkCreateInstance` calls of several threads).
static STARTING: SpinLock<()> = SpinLock::new(());

/// Whether dispatches are being counted. One relaxed load: the dispatch hooks' only check.
#[inline(always)]
pub fn on() -> bool {
    STATE.load(Ordering::Relaxed) == ON
}

pub fn settings() -> Option<&'static Settings> {
    SETTINGS.get()
}

pub fn start_ns() -> u64 {
    START_NS.load(Ordering::Relaxed)
}

/// Whether the layer should make devices that offer `VK_KHR_pipeline_executable_properties` record
/// pipeline statistics (`BACKSCOPE_VK_PIPELINE_STATS` is not `0`).
pub fn statistics_wanted() -> bool {
    on() && STATISTICS_WANTED.load(Ordering::Relaxed)
}

/// Starts the layer in this process, once (at the first instance).
pub fn start() {
    if STATE.load(Ordering::Acquire) != UNINIT {
        return;
    }
    let _starting = STARTING.lock();
    if STATE.load(Ordering::Acquire) != UNINIT {
        return;
    }
    match Settings::from_env() {
        Ok(settings) => {
            STATISTICS_WANTED
                .store(env::get(env::VK_PIPELINE_STATS).is_none_or(|v| v.trim() != "0"), Ordering::Relaxed);
            let interval_ms = settings.interval_ms;
            crate::pipelines::init(settings.max_kernels);
            let _ = SETTINGS.set(settings);
            START_NS.store(format::clock::now_ns(), Ordering::Relaxed);
            pin_in_memory();
            // SAFETY: the handler is an `extern "C" fn()` that cannot unwind.
            unsafe { libc::pthread_atfork(None, None, Some(fork_child)) };
            STATE.store(ON, Ordering::Release);
            crate::writer::spawn_thread(interval_ms);
            crate::crash::arm();
        }
        Err(why) => {
            STATE.store(OFF, Ordering::Release);
            report_once(format_args!("{why}"));
        }
    }
}

/// The loader unloads a layer library when the last instance is destroyed; the writer thread and
/// the exit flush run this library's code until the process ends, so it must stay mapped.
fn pin_in_memory() {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr fills `info` for an address inside this library (a function of it).
    let found = unsafe { libc::dladdr(pin_in_memory as *const libc::c_void, &mut info) };
    if found != 0 && !info.dli_fname.is_null() {
        // SAFETY: RTLD_NOLOAD|RTLD_NODELETE on an object already loaded only marks it as never to be
        // unloaded; the extra reference is deliberately kept.
        unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
    }
}

/// Switches observation off for the rest of the process and says why, once.
pub fn disable(why: fmt::Arguments<'_>) {
    STATE.store(OFF, Ordering::Release);
    report_once(why);
}

/// One line on stderr that does not switch observation off.
pub fn note(what: fmt::Arguments<'_>) {
    write_stderr(format!("backscope-vklayer[{}]: {what}\n", std::process::id()).as_bytes());
}

fn report_once(why: fmt::Arguments<'_>) {
    if !REPORTED.swap(true, Ordering::AcqRel) {
        note(why);
    }
}

fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice to fd 2; a closed stderr just makes this fail.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// Runs layer code from a hook: a panic switches observation off instead of unwinding into C.
#[inline(always)]
pub fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(value) => Some(value),
        Err(payload) => {
            report_panic(payload.as_ref());
            None
        }
    }
}

#[cold]
fn report_panic(payload: &(dyn std::any::Any + Send)) {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    disable(format_args!("internal error ({what}); not observing, the program continues"));
}

/// A forked child does not observe: Vulkan objects are not usable across `fork`, and the parent's
/// trace is not the child's. Locks a parent thread held are released so that forwarding never waits;
/// while the layer is off, hooks write nothing but the dispatch tables.
extern "C" fn fork_child() {
    let _ = std::panic::catch_unwind(|| {
        STATE.store(OFF, Ordering::Release);
        STARTING.release_for_fork();
        crate::dispatch::force_unlock_in_child();
        crate::pipelines::force_unlock_in_child();
        crate::commands::force_unlock_in_child();
        crate::writer::forget_in_child();
        crate::crash::reset_in_child();
        crate::locus::reset_in_child();
    });
}
