//! Observer life cycle: configuration, lazy start, self-disabling, fork handling.
//!
//! The hot path reads one atomic ([`active`]). The first hook call of a process starts the
//! observer (`#[cold]` CAS; other threads wait the few microseconds it takes). A problem that
//! makes observation unsafe or pointless (no output configured, the trace cannot be written, an
//! internal panic) switches it off for good with one line on stderr; hooks then only forward.
//!
//! This module imports no other module of the observer: what starting involves (tables, the writer
//! thread, fork handlers) is `crate::start`'s, which hands it in ([`active_with`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use format::env;
use format::fork::ForkHandlers;
use format::runtime::Reporter;
use format::spin::SpinLock;

pub use format::env::Destination;

#[derive(Clone, Debug)]
pub struct Config {
    pub destination: Destination,
    /// 0: no periodic windows, only the final flush at exit.
    pub interval_ms: u64,
    pub max_kernels: u32,
    /// Most bytes of this process's trace file (all its segments, when it rotates); 0: no limit.
    pub max_bytes: u64,
    /// Segments a rotating trace keeps (`BACKSCOPE_TRACE_ROTATE`); below 2 it does not rotate.
    pub rotate: u32,
    pub inject_panic: bool,
}

impl Config {
    /// The format crate's settings (read with libc's `getenv`, which takes no lock: a forked child's
    /// parent may have held std's environment lock at fork time); the kernel table clamps
    /// `max_kernels` to its own limit.
    pub fn from_env() -> Result<Config, &'static str> {
        let settings = env::Settings::from_env()?;
        Ok(Config {
            destination: settings.destination,
            interval_ms: settings.interval_ms,
            max_kernels: settings.max_kernels,
            max_bytes: settings.max_bytes,
            rotate: settings.rotate,
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
/// CLOCK_MONOTONIC ns at which this process (or forked child) started observing.
static START_NS: AtomicU64 = AtomicU64::new(0);
static REPORTER: Reporter = Reporter::new("backscope-observer");

/// Whether launches should be observed; starts the observer at the first call with `start` (run while other
/// threads wait; returns the window interval) and, once it is on, `started`.
#[inline(always)]
pub fn active_with(start: fn() -> Result<u64, &'static str>, started: fn(u64)) -> bool {
    match STATE.load(Ordering::Acquire) {
        ON => true,
        OFF => false,
        _ => start_slow(start, started),
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
fn start_slow(start: fn() -> Result<u64, &'static str>, started: fn(u64)) -> bool {
    loop {
        match STATE.compare_exchange(UNINIT, STARTING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                START_NS.store(format::clock::now_ns(), Ordering::Relaxed);
                let result = std::panic::catch_unwind(start).unwrap_or(Err("internal error during start-up"));
                return match result {
                    Ok(interval_ms) => {
                        STATE.store(ON, Ordering::Release);
                        // Only now, with no thread waiting on STARTING: `started` spawns the writer
                        // thread, which can end up in the dynamic loader (std looks up symbols with
                        // dlsym), and a thread waiting here may be a library constructor holding the
                        // loader's lock.
                        let _ = std::panic::catch_unwind(|| started(interval_ms));
                        true
                    }
                    Err(why) => {
                        STATE.store(OFF, Ordering::Release);
                        REPORTER.stop_once(format_args!("{why}"));
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

/// Reads the configuration and keeps it; once per process image (a forked child keeps its parent's).
pub fn configure() -> Result<&'static Config, &'static str> {
    if let Some(config) = CONFIG.get() {
        return Ok(config);
    }
    let config = Config::from_env()?;
    // std's default hook would print a multi-line report into the program's stderr; keep the
    // message for the single line that `guarded` prints. The hook belongs to this library's
    // own copy of std: a Rust host program's panics are not affected.
    std::panic::set_hook(Box::new(|info| {
        if let Some(mut last) = LAST_PANIC.try_lock() {
            let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            *last = Some(format!("{} at {location}", format::runtime::panic_text(info.payload())));
        }
    }));
    Ok(CONFIG.get_or_init(|| config))
}

/// Switches the observer off for the rest of the process and says why, once, on stderr.
pub fn disable(why: fmt::Arguments<'_>) {
    STATE.store(OFF, Ordering::Release);
    format::crash::writer_finished();
    REPORTER.stop_once(why);
}

/// One line on stderr that does not switch the observer off.
pub fn note(what: fmt::Arguments<'_>) {
    REPORTER.note(what);
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

/// In a forked child (registered after every other module's handlers): the child has no writer
/// thread, so the next hook call restarts the observer for the child (own pid, own file, own
/// thread). An observer that was off stays off.
pub const FORK: ForkHandlers = ForkHandlers::child(restart_in_child);

fn restart_in_child() {
    if STATE.load(Ordering::Acquire) == ON {
        START_NS.store(format::clock::now_ns(), Ordering::Relaxed);
        STATE.store(UNINIT, Ordering::Release);
    }
}
