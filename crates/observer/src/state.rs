//! Observer life cycle: configuration, lazy start, self-disabling, fork handling.
//!
//! The hot path reads one atomic ([`active`]). The first hook call of a process starts the
//! observer (`#[cold]` CAS; other threads wait the few microseconds it takes). A problem that
//! makes observation unsafe or pointless (no output configured, the trace cannot be written, an
//! internal panic) switches it off for good with one line on stderr; hooks then only forward.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::{graphs, registry, writer};
use format::spin::SpinLock;

use format::env;

pub use format::env::Destination;

#[derive(Clone, Debug)]
pub struct Config {
    pub destination: Destination,
    /// 0: no periodic windows, only the final flush at exit.
    pub interval_ms: u64,
    pub max_kernels: u32,
    /// Most bytes of this process's trace file; 0: no limit.
    pub max_bytes: u64,
    pub inject_panic: bool,
}

impl Config {
    /// The format crate's settings (read with libc's `getenv`, which takes no lock: a forked child's
    /// parent may have held std's environment lock at fork time), within the observer's limits.
    pub fn from_env() -> Result<Config, &'static str> {
        let settings = env::Settings::from_env()?;
        Ok(Config {
            destination: settings.destination,
            interval_ms: settings.interval_ms,
            max_kernels: settings.max_kernels.min(registry::HARD_MAX_KERNELS),
            max_bytes: settings.max_bytes,
            inject_panic: env::get(env::TEST_INJECT_PANIC).is_some_and(|v| v == "1"),
        })
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

pub fn config() -> Option<&'static Config> {
    CONFIG.get()
}

/// See [`env::TEST_INJECT_PANIC`]: fault injection for tests.
pub fn panic_injected() -> bool {
    config().is_some_and(|c| c.inject_panic)
}

const UNINIT: u8 = 0;
const STARTING: u8 = 1;
const ON: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Work done once per process image (inherited by forked children): config, tables, atfork.
static IMAGE_READY: AtomicBool = AtomicBool::new(false);
/// CLOCK_MONOTONIC ns at which this process (or forked child) started observing.
static START_NS: AtomicU64 = AtomicU64::new(0);
static DISABLE_REPORTED: AtomicBool = AtomicBool::new(false);

/// Whether launches should be observed; starts the observer at the first call.
#[inline(always)]
pub fn active() -> bool {
    match STATE.load(Ordering::Acquire) {
        ON => true,
        OFF => false,
        _ => start_slow(),
    }
}

/// Whether the observer is running (without starting it).
pub fn is_on() -> bool {
    STATE.load(Ordering::Acquire) == ON
}

pub fn start_ns() -> u64 {
    START_NS.load(Ordering::Relaxed)
}

#[cold]
#[inline(never)]
fn start_slow() -> bool {
    loop {
        match STATE.compare_exchange(UNINIT, STARTING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                let started = std::panic::catch_unwind(start).unwrap_or(Err("internal error during start-up"));
                return match started {
                    Ok(interval_ms) => {
                        STATE.store(ON, Ordering::Release);
                        // Only now, with no thread waiting on STARTING: spawning a thread can end up
                        // in the dynamic loader (std looks up symbols with dlsym), and a thread
                        // waiting here may be a library constructor holding the loader's lock. With
                        // interval 0 the thread only serves the crash handler's flush requests.
                        writer::spawn_thread(interval_ms);
                        true
                    }
                    Err(why) => {
                        STATE.store(OFF, Ordering::Release);
                        report_once(format_args!("{why}"));
                        false
                    }
                };
            }
            Err(ON) => return true,
            Err(OFF) => return false,
            // Another thread is starting the observer (the same thread cannot be: hooks nested
            // inside start-up see the re-entrancy flag and never get here).
            Err(_) => {
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }
}

/// Start-up work done while other threads wait (STARTING): nothing here may take the dynamic
/// loader's lock (no dlopen/dlsym/dladdr, no thread creation), because a waiting thread may hold it
/// (a library constructor registering kernels). Returns the window interval.
fn start() -> Result<u64, &'static str> {
    if !IMAGE_READY.load(Ordering::Acquire) {
        let config = Config::from_env()?;
        // std's default hook would print a multi-line report into the program's stderr; keep the
        // message for the single line that `guarded` prints. The hook belongs to this library's
        // own copy of std: a Rust host program's panics are not affected.
        std::panic::set_hook(Box::new(|info| {
            if let Some(mut last) = LAST_PANIC.try_lock() {
                let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
                let payload = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                *last = Some(format!("{payload} at {location}"));
            }
        }));
        registry::init(config.max_kernels);
        let _ = CONFIG.set(config);
        // SAFETY: the handlers are `extern "C" fn()` that never unwind (each catches panics).
        if unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) } != 0 {
            return Err("pthread_atfork failed; not observing");
        }
        IMAGE_READY.store(true, Ordering::Release);
    }
    let now = format::clock::now_ns();
    START_NS.store(now, Ordering::Relaxed);
    crate::locus::OPEN_WINDOW_T0.store(now, Ordering::Relaxed);
    Ok(config().map_or(0, |c| c.interval_ms))
}

/// The writer thread runs code of this library until the process ends, so the library must never
/// be unloaded, even if someone loads it with `dlopen` and later `dlclose`s it. Called by the writer
/// thread (it takes the loader's lock, see `start`).
pub fn pin_in_memory() {
    if let Some(path) = crate::real::own_path() {
        // SAFETY: RTLD_NOLOAD|RTLD_NODELETE on the already loaded object only marks it as
        // non-unloadable; the extra reference is deliberately kept.
        unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
    }
}

/// Switches the observer off for the rest of the process and says why, once, on stderr.
pub fn disable(why: fmt::Arguments<'_>) {
    STATE.store(OFF, Ordering::Release);
    crate::crash::writer_finished();
    report_once(why);
}

/// One line on stderr that does not switch the observer off.
pub fn note(what: fmt::Arguments<'_>) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    write_stderr(format!("backscope-observer[{pid}]: {what}\n").as_bytes());
}

fn report_once(why: fmt::Arguments<'_>) {
    if DISABLE_REPORTED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let line = format!("backscope-observer[{pid}]: {why}\n");
    write_stderr(line.as_bytes());
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

static LAST_PANIC: SpinLock<Option<String>> = SpinLock::new(None);

/// Runs observer code from a hook: a panic disables the observer instead of unwinding into C.
#[inline(always)]
pub fn guarded<F: FnOnce()>(f: F) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        report_panic();
    }
}

#[cold]
fn report_panic() {
    let what = LAST_PANIC.try_lock().and_then(|mut last| last.take()).unwrap_or_default();
    disable(format_args!("internal error ({what}); observer disabled, the program continues unobserved"));
}

// Fork: registry and graph locks are taken before `fork` so that their data is consistent in the
// child; the writer's lock is not (it can be held across a `write`, and `fork` must not wait for
// I/O), so the child abandons the writer state instead.
extern "C" fn fork_prepare() {
    let _ = std::panic::catch_unwind(|| {
        registry::acquire_for_fork();
        graphs::acquire_for_fork();
    });
}

extern "C" fn fork_parent() {
    let _ = std::panic::catch_unwind(|| {
        graphs::release_for_fork();
        registry::release_for_fork();
    });
}

extern "C" fn fork_child() {
    let _ = std::panic::catch_unwind(|| {
        graphs::release_for_fork();
        registry::release_for_fork();
        writer::reset_in_child();
        registry::reset_counters_in_child();
        graphs::reset_in_child();
        crate::crash::reset_in_child();
        // The child has no writer thread: the next hook call restarts the observer for the child
        // (own pid, own file, own thread). An observer that was off stays off.
        if STATE.load(Ordering::Acquire) == ON {
            START_NS.store(format::clock::now_ns(), Ordering::Relaxed);
            STATE.store(UNINIT, Ordering::Release);
        }
    });
}
