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
