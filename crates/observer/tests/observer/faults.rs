//! The observer must never change what the program does: not when its output cannot be written,
//! not when no runtime is there, not when it is not configured.

use std::path::Path;

use crate::common::*;

/// Runs `host args` plainly and under `setup`; same exit status and stdout, and exactly one line
/// from the observer on stderr, which contains `why`.
fn disabled_with_one_line(args: &[&str], setup: Setup, why: &str) -> Run {
    let programs = fake_programs();
    let baseline = run(&programs.host, args, &Setup::plain());
    let observed = run(&programs.host, args, &setup);
    assert!(baseline.status.success());
    assert_eq!(observed.status.code(), baseline.status.code(), "{observed:?}");
    assert_eq!(observed.stdout, baseline.stdout);
    let lines = observer_lines(&observed.stderr);
    assert_eq!(lines.len(), 1, "expected one observer line, got: {}", observed.stderr);
    assert!(lines[0].contains(why), "{:?} does not mention {why:?}", lines[0]);
    observed
}

#[test]
fn an_unwritable_trace_directory_disables_the_observer_with_one_line() {
    // A directory below a regular file: fails with ENOTDIR even for root, unlike permission bits.
    let dir = TempDir::new("unwritable");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let target = file.join("traces");
    let setup = Setup::observed_with(&[("BACKSCOPE_TRACE_DIR", target.to_str().unwrap())]);
    disabled_with_one_line(&["basic"], setup, "Not a directory");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "nothing but the file");
}

#[test]
fn a_full_disk_disables_the_observer_with_one_line() {
    let setup = Setup::observed_with(&[("BACKSCOPE_TRACE_FILE", "/dev/full")]);
    disabled_with_one_line(&["basic"], setup, "No space left on device");
    // Long-running, threaded, 1 ms windows: still one line, no hang, same output.
    let setup = Setup::observed_with(&[("BACKSCOPE_TRACE_FILE", "/dev/full"), ("BACKSCOPE_TRACE_INTERVAL_MS", "1")]);
    disabled_with_one_line(&["threads", "4", "50000"], setup, "No space left on device");
}

#[test]
fn without_configuration_the_observer_only_forwards() {
    disabled_with_one_line(&["basic"], Setup::observed_with(&[]), "BACKSCOPE_TRACE_DIR");
}

#[test]
fn a_panic_inside_the_observer_disables_it_and_the_program_continues() {
    let dir = TempDir::new("panic");
    let setup = Setup::traced(dir.path()).env("BACKSCOPE_TEST_INJECT_PANIC", "1");
    // The registration itself still reaches the runtime: every launch succeeds as without observer.
    let run = disabled_with_one_line(&["basic"], setup, "panic injected by BACKSCOPE_TEST_INJECT_PANIC");
    assert!(!run.stderr.contains("panicked at"), "std's panic report leaked: {}", run.stderr);
    assert!(traces(dir.path()).is_empty(), "a disabled observer writes no trace");
}

#[test]
fn trace_file_override_expands_the_pid() {
    let dir = TempDir::new("file-override");
    let pattern = dir.path().join("custom-%p.jsonl");
    let setup = Setup::observed_with(&[("BACKSCOPE_TRACE_FILE", pattern.to_str().unwrap())]);
    let run = run(&fake_programs().host, &["twice"], &setup);
    assert!(run.status.success());
    let path = dir.path().join(format!("custom-{}.jsonl", run.pid));
    let trace = crate::trace::TraceFile::read(&path).unwrap();
    assert_eq!(trace.pid(), run.pid);
    assert_eq!(by_name(&trace)["_Z12twice_kernelv"].launches, 5);
}

#[test]
fn hooks_without_a_runtime_return_not_supported_and_find_it_once_loaded() {
    let dir = TempDir::new("missing");
    let programs = fake_programs();
    let plain = run(&programs.host, &["missing"], &Setup::plain());
    // Without the observer nothing defines these names before the runtime is loaded.
    assert!(plain.stdout.contains("before-load hipLaunchKernel absent"), "{}", plain.stdout);
    let observed = run(&programs.host, &["missing"], &Setup::traced(dir.path()));
    assert!(observed.status.success(), "{observed:?}");
    for line in [
        "before-load hipLaunchKernel rc=801",
        "before-load cudaLaunchKernel rc=801",
        "before-load __hipRegisterFatBinary null",
        // Resolution is retried once a library was loaded (RTLD_LOCAL here).
        "after-load hipLaunchKernel rc=0",
        "fake _Z12hip_kernel_av executed 1 failed 0 ",
    ] {
        assert!(observed.stdout.lines().any(|l| l.starts_with(line)), "missing {line:?} in:\n{}", observed.stdout);
    }
    assert!(observer_lines(&observed.stderr).is_empty(), "{}", observed.stderr);
    let trace = only_trace(dir.path(), observed.pid);
    assert_eq!(by_name(&trace)["_Z12hip_kernel_av"].launches, 1);
}

#[test]
fn the_observer_library_exports_the_hooks() {
    let output = std::process::Command::new("nm").args(["-D", "--defined-only"]).arg(observer_lib()).output().unwrap();
    let symbols = String::from_utf8_lossy(&output.stdout);
    for name in [
        "hipLaunchKernel",
        "__hipRegisterFunction",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipGraphLaunch",
        "cudaLaunchKernel",
        "__cudaLaunchKernel",
        "__cudaGetKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel_ptsz",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaGraphLaunch",
        "cudaStreamBeginCapture",
        "cudaStreamDestroy",
        "cuStreamEndCapture",
        "cuStreamDestroy_v2",
        "hipStreamDestroy",
    ] {
        assert!(symbols.lines().any(|l| l.ends_with(&format!(" T {name}"))), "{name} not exported");
    }
    // Only hooks are exported: no Rust symbols leak into the host's namespace.
    assert!(!symbols.contains("_ZN"), "mangled Rust symbols exported");
    assert!(Path::new(observer_lib()).is_file());
}

/// The trace files of `dir`, by pid, checking that every file is readable and holds one process.
fn traces_by_pid(dir: &Path) -> std::collections::BTreeMap<u32, crate::trace::TraceFile> {
    let read = crate::trace::read_dir(dir).unwrap();
    assert!(read.problems.is_empty(), "{:?}", read.problems);
    read.traces.into_iter().map(|t| (t.pid(), t)).collect()
}

#[test]
fn a_trace_file_without_pid_is_never_shared_by_two_processes() {
    // `host fork`: the parent, a forked child and a fork+exec child all launch kernels.
    let dir = TempDir::new("file-no-pid");
    let pattern = dir.path().join("trace-main.jsonl");
    let setup = Setup::observed_with(&[("BACKSCOPE_TRACE_FILE", pattern.to_str().unwrap())]);
    let run = run(&fake_programs().host, &["fork"], &setup);
    assert!(run.status.success(), "{run:?}");
    assert!(observer_lines(&run.stderr).is_empty(), "{}", run.stderr);
    let all = traces_by_pid(dir.path());
    assert_eq!(all.len(), 3, "one file per process: {:?}", all.keys());
    // One of them has the name as given; each other one carries its own pid in its name.
    let mut exact = 0;
    for (pid, trace) in &all {
        let name = trace.path.as_ref().unwrap().file_name().unwrap().to_str().unwrap().to_string();
        if name == "trace-main.jsonl" {
            exact += 1;
        } else {
            assert_eq!(name, format!("trace-main.{pid}.jsonl"));
        }
        assert!(trace.is_complete(), "{name}");
    }
    assert_eq!(exact, 1);
    assert_eq!(all[&run.pid].total_launches(crate::trace::Range::All), 4);
    // A second run with the same setting appends to nothing: its process gets a file of its own.
    let before = std::fs::read(&pattern).unwrap();
    let again = crate::common::run(&fake_programs().host, &["twice"], &setup);
    assert!(again.status.success());
    assert_eq!(std::fs::read(&pattern).unwrap(), before, "the first run's file is left as it was");
    let second = crate::trace::TraceFile::read(&dir.path().join(format!("trace-main.{}.jsonl", again.pid))).unwrap();
    assert_eq!(by_name(&second)["_Z12twice_kernelv"].launches, 5);
}

/// Runs `host args` plainly and under `setup`; the program behaves the same, and the observer
/// writes exactly one line, containing `says`. Returns the observed run.
fn same_program_one_line(args: &[&str], setup: Setup, baseline: Setup, says: &str) -> (Run, Run) {
    let programs = fake_programs();
    let plain = run(&programs.host, args, &baseline);
    let observed = run(&programs.host, args, &setup);
    assert!(plain.status.success(), "{plain:?}");
    assert_eq!(observed.status.code(), plain.status.code(), "{observed:?}");
    assert_eq!(observed.stdout, plain.stdout);
    let lines = observer_lines(&observed.stderr);
    assert_eq!(lines.len(), 1, "expected one observer line, got: {}", observed.stderr);
    assert!(lines[0].contains(says), "{:?} does not mention {says:?}", lines[0]);
    (plain, observed)
}

/// Per kernel name, the trace's count must not exceed the runtime's (launches plus failures): a cut
/// trace is a lower bound, never an over-count.
fn assert_lower_bound(trace: &crate::trace::TraceFile, stdout: &str) {
    let fake = fake_counts(stdout);
    for (name, stats) in by_name(trace) {
        let (executed, failed) = fake.get(&name).copied().unwrap_or_default();
        assert!(stats.launches <= executed + failed, "{name}: {} > {}", stats.launches, executed + failed);
    }
}

#[test]
fn the_trace_byte_budget_cuts_with_a_truncated_record() {
    const BUDGET: u64 = 16 * 1024;
    let dir = TempDir::new("budget");
    // 3,000 kernels: their definitions alone are about 100 KB.
    let setup = Setup::traced(dir.path()).env("BACKSCOPE_TRACE_MAX_BYTES", "16K");
    let (_, run) = same_program_one_line(&["many", "3000"], setup, Setup::plain(), "budget of 16384 bytes");
    let all = traces_by_pid(dir.path());
    let trace = &all[&run.pid];
    let path = trace.path.as_ref().unwrap();
    let size = std::fs::metadata(path).unwrap().len();
    assert!(size <= BUDGET, "{} is {size} bytes, over the budget", path.display());
    assert_eq!(trace.header.max_bytes, BUDGET);
    let cut = trace.truncated.as_ref().expect("a truncated record");
    assert_eq!((cut.reason.as_str(), cut.max_bytes), ("budget", Some(BUDGET)));
    // `bytes` is the file's size before the record: the record is the last line.
    let text = std::fs::read_to_string(path).unwrap();
    let last = text.lines().last().unwrap();
    assert_eq!(cut.bytes as usize, text.len() - last.len() - 1);
    assert!(trace.end.is_none() && !trace.partial_last_line);
    assert!(cut.at_ns >= trace.header.start_ns && cut.at_ns <= run.ended_ns);
    assert!(trace.kernels.len() < 3000, "the definitions were cut too");
    assert_lower_bound(trace, &run.stdout);
}

/// The same busy program with the budget split into 3 rotating segments (`BACKSCOPE_TRACE_ROTATE`): the trace never
/// stops, at most 3 files stay, within the budget together, each readable alone with every kernel definition, and
/// read together they are one process that reached its exit flush, its counts lower bounds.
#[test]
fn a_rotating_trace_keeps_its_newest_segments_within_the_budget() {
    const BUDGET: u64 = 48 * 1024;
    let dir = TempDir::new("rotate");
    let setup = Setup::traced(dir.path())
        .env("BACKSCOPE_TRACE_INTERVAL_MS", "1")
        .env("BACKSCOPE_TRACE_MAX_BYTES", "48K")
        .env("BACKSCOPE_TRACE_ROTATE", "3");
    let run = run(&fake_programs().host, &["threads", "4", "400000"], &setup);
    assert!(run.status.success(), "{run:?}");
    assert!(observer_lines(&run.stderr).is_empty(), "never cut: {}", run.stderr);
    let mut files: Vec<std::path::PathBuf> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() <= 3, "{files:?}");
    let total: u64 = files.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum();
    assert!(total <= BUDGET, "{total}");
    let alone: Vec<crate::trace::TraceFile> =
        files.iter().map(|f| crate::trace::TraceFile::read(f).unwrap_or_else(|e| panic!("{e}"))).collect();
    let kernels = alone.iter().map(|t| t.kernels.len()).max().unwrap();
    assert!(alone.iter().all(|t| t.kernels.len() == kernels && t.header.segment.is_some()), "{files:?}");
    let all = traces_by_pid(dir.path());
    let trace = &all[&run.pid];
    let segments = trace.rotated_away().expect("the first segments were rotated away");
    assert_eq!(segments.present.len(), files.len());
    assert!(segments.first_index() >= 1 && segments.missing().is_empty());
    assert!(trace.end.is_some() && trace.rotated.is_none() && !trace.is_cut());
    assert_windows_well_formed(trace);
    assert_lower_bound(trace, &run.stdout);
    assert!(trace.total_launches(crate::trace::Range::All) < 4 * 400_000);
}

#[test]
fn a_failed_write_ends_the_trace_with_a_truncated_record() {
    // The file may not grow past 8,000 bytes (RLIMIT_FSIZE): the write that would pass it fails
    // with EFBIG after writing part of a line, as a write to a full disk does with ENOSPC. 1 ms
    // windows from 4 threads pass that size after some hundred windows.
    const LIMIT: u64 = 8000;
    let dir = TempDir::new("write-error");
    let setup = Setup::traced(dir.path()).env("BACKSCOPE_TRACE_INTERVAL_MS", "1").file_size_limit(LIMIT);
    let baseline = Setup::plain().file_size_limit(LIMIT);
    let (_, run) = same_program_one_line(&["threads", "4", "400000"], setup, baseline, "File too large");
    let all = traces_by_pid(dir.path());
    let trace = &all[&run.pid];
    let cut = trace.truncated.as_ref().expect("a truncated record");
    assert_eq!(cut.reason, "write_error");
    assert_eq!(cut.error.as_deref(), Some("File too large (os error 27)"));
    let size = std::fs::metadata(trace.path.as_ref().unwrap()).unwrap().len();
    assert!(size <= LIMIT, "{size}");
    assert!(!trace.partial_last_line, "the half-written line was cut away");
    assert!(!trace.windows.is_empty(), "the windows before the failure are kept");
    assert!(trace.end.is_none());
    assert_lower_bound(trace, &run.stdout);
    assert!(trace.total_launches(crate::trace::Range::All) < 4 * 400_000);
}
