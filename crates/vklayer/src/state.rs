//! The layer's life cycle: configuration, start, self-disabling, fork.
//!
//! The layer starts with the first `vkCreateInstance` of a process. Without a trace destination it
//! says so once on stderr and only forwards calls. Any internal failure (a panic, the trace file
//! cannot be written) switches observation off for the rest of the process with one line on stderr;
//! hooks keep forwarding every call unchanged.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use format::env::{self, Settings};

use format::fork::ForkHandlers;
use format::runtime::Reporter;
use format::spin::SpinLock;

/// What `crate::flag::HOT` starts with.
const UNINIT: u8 = 0;
/// On: what the recording hooks' common path expects (`crate::flag::Hot::first_word`).
pub const ON: u8 = 1;
const OFF: u8 = 2;

/// The life cycle, kept with the other settings the hooks read at every call.
static STATE: &crate::flag::Lane = &crate::flag::STATE;
static SETTINGS: OnceLock<Settings> = OnceLock::new();
static START_NS: AtomicU64 = AtomicU64::new(0);
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

/// Starts the layer in this process, once (at the first instance): `prepare` runs before observation is on (the
/// tables it needs), `started` after. Without a trace destination, observation stays off with one line on stderr.
pub fn start(prepare: fn(&Settings), started: fn(&Settings)) {
    if STATE.load(Ordering::Acquire) != UNINIT {
        return;
    }
    let _starting = STARTING.lock();
    if STATE.load(Ordering::Acquire) != UNINIT {
        return;
    }
    match Settings::from_env() {
        Ok(settings) => {
            STATISTICS_WANTED.store(env::on_unless_zero(env::VK_PIPELINE_STATS), Ordering::Relaxed);
            prepare(&settings);
            let settings = SETTINGS.get_or_init(|| settings);
            START_NS.store(format::clock::now_ns(), Ordering::Relaxed);
            // The loader unloads a layer library when the last instance is destroyed; the writer thread and the
            // exit flush run this library's code until the process ends, so it must stay mapped.
            format::runtime::pin_in_memory(start as *const () as usize);
            let _ = format::fork::register(FORK);
            STATE.store(ON, Ordering::Release);
            started(settings);
        }
        Err(why) => {
            STATE.store(OFF, Ordering::Release);
            REPORTER.stop_once(format_args!("{why}"));
        }
    }
}

static REPORTER: Reporter = Reporter::new("backscope-vklayer");

/// Switches observation off for the rest of the process and says why, once.
pub fn disable(why: fmt::Arguments<'_>) {
    STATE.store(OFF, Ordering::Release);
    REPORTER.stop_once(why);
}

/// One line on stderr that does not switch observation off.
pub fn note(what: fmt::Arguments<'_>) {
    REPORTER.note(what);
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
    let what = format::runtime::panic_text(payload);
    disable(format_args!("internal error ({what}); not observing, the program continues"));
}

/// A forked child does not observe: Vulkan objects are not usable across `fork`, and the parent's trace is not the
/// child's; the start lock a parent thread held is released. (Each module registers its own fork handlers.)
const FORK: ForkHandlers = ForkHandlers::child(off_in_child);

fn off_in_child() {
    STATE.store(OFF, Ordering::Release);
    STARTING.release_for_fork();
}
