//! The crash record: a program that dies of SIGSEGV or SIGABRT under the observer dies the same way
//! (same signal, same output) and leaves a trace whose `crash` record names the call in flight and
//! each thread's last launches, after a window holding every launch before the crash. Expected
//! launches come from the program itself (`host crash …` prints what it launches, on which thread).

use std::os::unix::process::ExitStatusExt;

use crate::common::*;
use crate::trace::TraceFile;

const A: &str = "_Z12hip_kernel_av";
const B: &str = "_Z12hip_kernel_bPfi";

/// Runs `host ARGS` plainly and traced (with `env`); both must die of `signal` with the same output.
fn crash_both(args: &[&str], signal: i32, env: &[(&str, &str)]) -> (Run, TempDir) {
    let programs = fake_programs();
    let dir = TempDir::new("crash");
    let mut plain = Setup::plain();
    let mut traced = Setup::traced(dir.path());
    for (k, v) in env {
        plain = plain.env(k, v);
        traced = traced.env(k, v);
    }
    let baseline = run(&programs.host, args, &plain);
    let observed = run(&programs.host, args, &traced);
    assert_eq!(baseline.status.signal(), Some(signal), "{baseline:?}");
    assert_eq!(observed.status.signal(), Some(signal), "the observer changed how the program ends: {observed:?}");
    assert_eq!(observed.stdout, baseline.stdout);
    assert!(observer_lines(&observed.stderr).is_empty(), "{}", observed.stderr);
    (observed, dir)
}

/// The one trace of the crashed process, read back.
fn crashed_trace(dir: &TempDir, pid: u32) -> TraceFile {
    let all = traces(dir.path());
    assert_eq!(all.keys().copied().collect::<Vec<_>>(), [pid]);
    let trace = all.into_values().next().unwrap();
    assert!(!trace.is_complete(), "a crashed process runs no exit flush");
    trace
}

/// Kernel names of a thread's remembered launches, oldest first.
fn launched(trace: &TraceFile, thread: usize) -> Vec<&str> {
    let crash = &trace.crashes[0];
    crash.threads[thread].launches.iter().map(|l| trace.kernels[&l.kernel].name.as_str()).collect()
}

/// What every `host crash` scenario launched before crashing: a x3 and b x2 on the main thread (whose
/// thread id is the pid), b x1 on a second thread that has exited.
fn assert_launches_before_the_crash(trace: &TraceFile, pid: u32) {
    let crash = &trace.crashes[0];
    assert_eq!(crash.tid, pid, "the main thread crashed");
    assert_eq!(crash.threads[0].tid, pid, "the receiving thread comes first");
    assert_eq!(launched(trace, 0), [A, A, A, B, B]);
    assert_eq!(crash.threads.len(), 2, "{crash:?}");
    assert_ne!(crash.threads[1].tid, pid);
    assert_eq!(launched(trace, 1), [B]);
    assert!(crash.threads[0].launches.iter().all(|l| !l.failed && l.shape.block == [1, 1, 1]));
    // The window written when the signal arrived holds all six launches.
    assert!(crash.flushed);
    let by = by_name(trace);
    assert_eq!((by[A].launches, by[B].launches), (3, 3));
    let last_window = trace.windows.last().unwrap();
    assert!(last_window.t1 <= crash.at_ns, "the flushed window ends before the record");
    assert!(crash.threads.iter().flat_map(|t| &t.launches).all(|l| l.window_t0 <= last_window.t0));
    assert_eq!(trace.fatal_crash().map(|c| c.seq), Some(1));
}

#[test]
fn a_segfault_leaves_each_threads_last_launches_and_the_same_death() {
    let (run, dir) = crash_both(&["crash", "segv"], libc::SIGSEGV, &[]);
    let trace = crashed_trace(&dir, run.pid);
    let crash = &trace.crashes[0];
    assert_eq!((crash.signal, crash.signal_name.as_str()), (libc::SIGSEGV, "SIGSEGV"));
    // SEGV_MAPERR (1, <asm-generic/siginfo.h>): a write through a null pointer, to an unmapped address.
    assert_eq!((crash.code, crash.addr), (1, 0));
    assert!(!crash.sent_by_process() && crash.sender_pid.is_none());
    assert_eq!(crash.threads[0].in_flight, None, "the crash was in the program's own code");
    assert_launches_before_the_crash(&trace, run.pid);
}

#[test]
fn an_abort_is_recorded_as_sent_by_the_process_itself() {
    let (run, dir) = crash_both(&["crash", "abort"], libc::SIGABRT, &[]);
    let trace = crashed_trace(&dir, run.pid);
    let crash = &trace.crashes[0];
    assert_eq!(crash.signal_name, "SIGABRT");
    // abort() raises the signal with tgkill: si_code SI_TKILL, the sender is the process itself.
    assert_eq!((crash.code, crash.sender_pid, crash.addr), (libc::SI_TKILL, Some(run.pid), 0));
    assert_launches_before_the_crash(&trace, run.pid);
}

#[test]
fn a_fault_inside_a_launch_names_the_call_in_flight() {
    // Windows of 0 ms: no periodic window, only the one the crash asks for.
    let (run, dir) = crash_both(&["crash", "in-launch"], libc::SIGSEGV, &[("BACKSCOPE_TRACE_INTERVAL_MS", "0")]);
    let trace = crashed_trace(&dir, run.pid);
    assert_eq!(trace.header.interval_ms, 0);
    assert_eq!(trace.windows.len(), 1, "the window the crash asked for");
    let crash = &trace.crashes[0];
    assert_eq!(crash.threads[0].in_flight.as_deref(), Some("hipLaunchKernel"));
    // The faulting launch never returned, so it was not counted or remembered.
    assert_launches_before_the_crash(&trace, run.pid);
}

#[test]
fn a_process_that_never_touched_a_runtime_still_leaves_its_crash() {
    let (run, dir) = crash_both(&["crash-early"], libc::SIGSEGV, &[]);
    let trace = crashed_trace(&dir, run.pid);
    assert_eq!(trace.header.pid, run.pid);
    assert_eq!(trace.header.writer, "backscope-observer");
    assert!(trace.kernels.is_empty() && trace.windows.is_empty());
    let crash = &trace.crashes[0];
    assert_eq!((crash.signal, crash.tid, crash.flushed), (libc::SIGSEGV, run.pid, false));
    assert_eq!(crash.threads.len(), 1);
    assert!(crash.threads[0].launches.is_empty() && crash.threads[0].in_flight.is_none());
}

#[test]
fn a_process_that_exits_normally_has_no_crash_record() {
    let programs = fake_programs();
    let dir = TempDir::new("no-crash");
    let run = run(&programs.host, &["basic"], &Setup::traced(dir.path()));
    assert!(run.status.success());
    assert!(only_trace(dir.path(), run.pid).crashes.is_empty());
}
