//! Scenarios against the test-double runtime (`c/fake_runtime.c`), which is `dlopen`ed after the
//! program started, as ggml backends are. Expected numbers come from the programs themselves: the
//! fake runtime prints how many launches it executed or failed per kernel, and each scenario's
//! launch pattern is fixed in `c/fake_backend.c`.

use std::collections::BTreeMap;

use crate::common::*;
use crate::trace::{KernelStats, Range, Shape};

fn shape(grid: [u32; 3], block: [u32; 3]) -> Shape {
    Shape { grid, block }
}

fn shapes_of(stats: &KernelStats) -> BTreeMap<Shape, u64> {
    stats.shapes.iter().copied().collect()
}

/// Output with the values that differ from run to run (pids, clock readings) masked.
fn normalize(stdout: &str) -> String {
    let mut out = String::new();
    for line in stdout.lines() {
        let line = match line.split_once("pid=") {
            Some((head, tail)) => format!("{head}pid=N{}", tail.trim_start_matches(|c: char| c.is_ascii_digit())),
            None if line.starts_with("phase ") => line.split_whitespace().take(2).collect::<Vec<_>>().join(" "),
            None => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Runs `host MODE…` without and with the observer; both must behave identically.
fn run_both(args: &[&str], extra_env: &[(&str, &str)]) -> (Run, Run, TempDir) {
    let programs = fake_programs();
    let dir = TempDir::new(args[0]);
    let mut plain = Setup::plain();
    let mut traced = Setup::traced(dir.path());
    for (k, v) in extra_env {
        plain = plain.env(k, v);
        traced = traced.env(k, v);
    }
    let baseline = run(&programs.host, args, &plain);
    let observed = run(&programs.host, args, &traced);
    assert!(baseline.status.success(), "baseline failed: {baseline:?}");
    assert_eq!(observed.status.code(), baseline.status.code(), "exit status changed: {observed:?}");
    assert_eq!(
        normalize(&observed.stdout),
        normalize(&baseline.stdout),
        "the program's output changed under the observer"
    );
    assert!(observer_lines(&observed.stderr).is_empty(), "observer complained: {}", observed.stderr);
    (baseline, observed, dir)
}

fn check_basic(dlopen_global: bool) {
    let flag = if dlopen_global { "1" } else { "0" };
    let (_, run, dir) = run_both(&["basic"], &[("FAKE_DLOPEN_GLOBAL", flag)]);
    let trace = only_trace(dir.path(), run.pid);
    assert_eq!(trace.header.ppid, std::process::id());
    assert!(trace.header.exe.ends_with("/host"), "{}", trace.header.exe);
    assert_eq!(trace.header.cmdline.last().map(String::as_str), Some("basic"));
    assert!(trace.header.start_ns >= run.started_ns && trace.end.as_ref().unwrap().end_ns <= run.ended_ns);
    assert_windows_well_formed(&trace);

    let fake = fake_counts(&run.stdout);
    assert!(fake.len() >= 12, "fake runtime printed {fake:?}");
    let observed = by_name(&trace);
    // Every kernel the runtime saw a launch of, with the same number of calls and failures.
    for (name, &(executed, failed)) in &fake {
        let stats = observed.get(name);
        let (launches, errors) = stats.map_or((0, 0), |s| (s.launches, s.errors));
        assert_eq!((launches, errors), (executed + failed, failed), "kernel {name}");
    }
    // How each kernel reached the runtime, and where its name came from.
    let expected_api = [
        ("_Z12hip_kernel_av", "hip", "register"),
        ("_Z12hip_kernel_bPfi", "hip", "register"),
        ("Cijk_Ailk_Bljk_SB_MT64x64x8", "hip_module", "get_function"),
        ("hip_unseen_stub_kernel", "hip", "runtime"),
        ("hip_unseen_module_kernel", "hip_module", "runtime"),
        ("_Z6cuda_cPf", "cuda", "register"),
        ("_Z6cuda_dv", "cuda", "register"),
        ("cuda_unseen_stub_kernel", "cuda", "runtime"),
        ("cublas_like_gemm_kernel", "cu", "get_function"),
        ("cu_unseen_function_kernel", "cu", "runtime"),
    ];
    for (name, api, source) in expected_api {
        let def = trace.kernels.values().find(|k| k.name == name).unwrap_or_else(|| panic!("{name} not defined"));
        assert_eq!((def.api.as_str(), def.source.as_str()), (api, source), "{name}");
    }
    assert_eq!(trace.kernels.len(), 12, "one definition per kernel: {:?}", trace.kernels);

    // Shapes: b was launched with grid (i+1, 2, 1) for i < 5, and twice on the failing stream.
    let mut b = BTreeMap::new();
    for i in 1..=5 {
        b.insert(shape([i, 2, 1], [32, 4, 1]), 1);
    }
    b.insert(shape([1, 1, 1], [1, 1, 1]), 2);
    assert_eq!(shapes_of(&observed["_Z12hip_kernel_bPfi"]), b);
    // c: 2 cudaLaunchKernel + 3 __cudaLaunchKernel with one shape (the nested cudaLaunchKernel the
    // fake runtime makes inside __cudaLaunchKernel is not counted again), 4 cudaLaunchKernelExC.
    assert_eq!(
        shapes_of(&observed["_Z6cuda_cPf"]),
        BTreeMap::from([(shape([8, 1, 1], [128, 1, 1]), 5), (shape([16, 1, 1], [256, 1, 1]), 4)])
    );
    // hipExtModuleLaunchKernel's global size 256 with blocks of 64 is recorded as 4 blocks.
    assert_eq!(
        shapes_of(&observed["Cijk_Ailk_Bljk_SB_MT64x64x8"]),
        BTreeMap::from([(shape([4, 4, 1], [256, 1, 1]), 2), (shape([4, 1, 1], [64, 1, 1]), 1)])
    );
    assert_eq!(
        shapes_of(&observed["cublas_like_gemm_kernel"]),
        BTreeMap::from([(shape([2, 2, 1], [128, 1, 1]), 2), (shape([3, 1, 1], [64, 1, 1]), 1)])
    );
}

#[test]
fn runtime_loaded_later_with_rtld_local_is_found_and_every_entry_point_counted() {
    check_basic(false);
}

#[test]
fn runtime_loaded_later_with_rtld_global_is_found_and_every_entry_point_counted() {
    check_basic(true);
}

#[test]
fn launches_from_eight_threads_are_counted_exactly() {
    const THREADS: u64 = 8;
    const N: u64 = 100_000;
    let (_, run, dir) = run_both(&["threads", "8", "100000"], &[("BACKSCOPE_TRACE_INTERVAL_MS", "5")]);
    let trace = only_trace(dir.path(), run.pid);
    assert_windows_well_formed(&trace);
    assert!(trace.windows.len() >= 2, "expected several 5 ms windows, got {}", trace.windows.len());
    let fake = fake_counts(&run.stdout);
    let observed = by_name(&trace);
    // The launch pattern of backend_hammer: kernel b on odd i, a on even i, grid (i % 3 + 1).
    let mut expected: BTreeMap<&str, BTreeMap<Shape, u64>> = BTreeMap::new();
    for i in 0..N {
        let name = if i % 2 == 1 { "_Z12hip_kernel_bPfi" } else { "_Z12hip_kernel_av" };
        *expected.entry(name).or_default().entry(shape([i as u32 % 3 + 1, 1, 1], [1, 1, 1])).or_insert(0) += THREADS;
    }
    for (name, shapes) in expected {
        assert_eq!(fake[name], (THREADS * N / 2, 0), "runtime's count of {name}");
        assert_eq!(observed[name].launches, THREADS * N / 2, "{name}");
        assert_eq!(shapes_of(&observed[name]), shapes, "{name}");
    }
    // The windows add up to the same totals.
    assert_eq!(trace.total_launches(Range::All), THREADS * N);
}

#[test]
fn a_kernel_registered_twice_is_defined_once() {
    let (_, run, dir) = run_both(&["twice"], &[]);
    let trace = only_trace(dir.path(), run.pid);
    let defs: Vec<_> = trace.kernels.values().filter(|k| k.name == "_Z12twice_kernelv").collect();
    assert_eq!(defs.len(), 1, "{defs:?}");
    // Launched 2 times through the first stub, 3 through the second stub of the same name.
    assert_eq!(fake_counts(&run.stdout)["_Z12twice_kernelv"], (5, 0));
    assert_eq!(trace.kernel_stats(Range::All).iter().find(|s| s.ids == [defs[0].id]).unwrap().launches, 5);
}

/// Kernel i of backend_many is launched (i % 3) + 1 times with grid (i % 5 + 1, 1, 1).
fn many_expected(i: u64) -> u64 {
    i % 3 + 1
}

#[test]
fn one_hundred_thousand_distinct_kernels() {
    const N: u64 = 100_000;
    let (_, run, dir) = run_both(&["many", "100000"], &[]);
    let trace = only_trace(dir.path(), run.pid);
    let total: u64 = (0..N).map(many_expected).sum();
    assert!(run.stdout.contains(&format!("many kernels={N} launches={total} failures=0")), "{}", run.stdout);
    assert!(run.stdout.contains(&format!("fake total executed {total}")));
    let observed = by_name(&trace);
    let mut seen = 0;
    for (name, stats) in &observed {
        let Some(i) = name.strip_prefix("many_kernel_") else { continue };
        let i: u64 = i.parse().unwrap();
        seen += 1;
        assert_eq!(stats.ids.len(), 1, "{name} defined more than once");
        assert_eq!(stats.launches, many_expected(i), "{name}");
        assert_eq!(stats.shapes, [(shape([(i % 5 + 1) as u32, 1, 1], [1, 1, 1]), many_expected(i))], "{name}");
    }
    assert_eq!(seen, N, "every kernel defined under its own name");
    assert!(trace.warnings.is_empty(), "{:?}", trace.warnings);
    assert_eq!(trace.total_launches(Range::All), total);
}

#[test]
fn a_full_kernel_table_counts_the_rest_in_the_overflow_kernel() {
    const N: u64 = 1_500;
    let (_, run, dir) = run_both(&["many", "1500"], &[("BACKSCOPE_MAX_KERNELS", "1000")]);
    let trace = only_trace(dir.path(), run.pid);
    assert!(trace.warnings.iter().any(|w| w.code == "kernel_table_full"), "{:?}", trace.warnings);
    assert!(trace.kernels.len() <= 1001);
    let overflow = trace.kernels.values().find(|k| k.api == "overflow").expect("overflow kernel defined");
    assert_eq!(overflow.id, 0);
    let observed = by_name(&trace);
    let mut expected_overflow = 0;
    for i in 0..N {
        match observed.get(&format!("many_kernel_{i}")) {
            Some(stats) => assert_eq!(stats.launches, many_expected(i)),
            None => expected_overflow += many_expected(i),
        }
    }
    assert!(expected_overflow > 0);
    assert_eq!(observed["(overflow)"].launches, expected_overflow);
    assert_eq!(trace.total_launches(Range::All), (0..N).map(many_expected).sum::<u64>());
}

/// The graph scenarios of fake_backend.c, the same for both APIs: kernel X captured twice (grid 1)
/// and Y once (grid 7) with Y launched directly once on another stream (grid 5); 10 replays; a
/// re-capture of X once (grid 9) applied by exec update; 3 replays; the exec launched into a second
/// capture whose graph is replayed twice; and a graph built without capture, replayed twice.
fn check_graphs(mode: &str, x: &str, y: &str, explicit: &str) {
    let (_, run, dir) = run_both(&[mode], &[]);
    let trace = only_trace(dir.path(), run.pid);
    let fake = fake_counts(&run.stdout);
    let observed = by_name(&trace);
    // The runtime's count of executions, for the kernels whose graphs were captured.
    assert_eq!(fake[x], (25, 0));
    assert_eq!(fake[y], (11, 0));
    let (kx, ky) = (&observed[x], &observed[y]);
    assert_eq!((kx.launches, kx.graph, kx.captured), (25, 25, 4), "{x}");
    assert_eq!((ky.launches, ky.graph, ky.captured), (11, 10, 1), "{y}");
    assert_eq!(shapes_of(kx), BTreeMap::from([(shape([1, 1, 1], [64, 1, 1]), 20), (shape([9, 1, 1], [64, 1, 1]), 5)]));
    assert_eq!(shapes_of(ky), BTreeMap::from([(shape([7, 1, 1], [1, 1, 1]), 10), (shape([5, 1, 1], [1, 1, 1]), 1)]));
    // The graph that was not captured ran 2 x 4 kernels in the runtime; the trace cannot name them
    // and says so instead of guessing.
    assert_eq!(fake[explicit], (8, 0));
    assert_eq!(observed[explicit].launches, 0);
    let graph_launch_lines =
        run.stdout.lines().filter(|l| l.contains("GraphLaunch") && !l.contains("(captured)")).count();
    let not_captured = run.stdout.lines().filter(|l| l.contains("GraphLaunch (not captured)")).count();
    assert_eq!(trace.graph_launches(Range::All), graph_launch_lines as u64);
    assert_eq!(trace.windows.iter().map(|w| w.unknown_graph_launches).sum::<u64>(), not_captured as u64);
    assert!(trace.warnings.iter().any(|w| w.code == "unknown_graph_exec"));
}

#[test]
fn hip_graph_replays_count_the_captured_kernels() {
    check_graphs("graph-hip", "_Z12hip_kernel_av", "_Z12hip_kernel_bPfi", "hip_explicit_graph_kernel");
}

#[test]
fn cuda_graph_replays_count_the_captured_kernels() {
    check_graphs("graph-cuda", "_Z6cuda_cPf", "_Z6cuda_dv", "cuda_explicit_graph_kernel");
}

#[test]
fn forked_and_execed_children_write_their_own_traces() {
    let (_, run, dir) = run_both(&["fork"], &[]);
    let pid_after = |prefix: &str| -> u32 {
        let line = run.stdout.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} line"));
        line[prefix.len()..].split_whitespace().next().unwrap().parse().unwrap()
    };
    let fork_child = pid_after("fork-child pid=");
    let exec_child = pid_after("exec-child pid=");
    let all = traces(dir.path());
    assert_eq!(all.keys().copied().collect::<Vec<_>>(), {
        let mut pids = vec![run.pid, fork_child, exec_child];
        pids.sort();
        pids
    });
    let launches = |pid: u32| -> BTreeMap<String, u64> {
        let trace = &all[&pid];
        assert!(trace.is_complete(), "trace of {pid} incomplete");
        by_name(trace).into_iter().filter(|(_, s)| s.launches > 0).map(|(n, s)| (n, s.launches)).collect()
    };
    // Parent: a x3 before the forks, a x1 after; the fake runtime in the parent agrees.
    assert_eq!(fake_counts(&run.stdout)["_Z12hip_kernel_av"], (4, 0));
    assert_eq!(launches(run.pid), BTreeMap::from([("_Z12hip_kernel_av".to_string(), 4)]));
    // Forked child: only its own b x2 (the parent's counts before the fork are not repeated).
    assert_eq!(launches(fork_child), BTreeMap::from([("_Z12hip_kernel_bPfi".to_string(), 2)]));
    assert_eq!(all[&fork_child].header.ppid, run.pid);
    // Exec'd child: a new image, cuda c x4.
    assert_eq!(launches(exec_child), BTreeMap::from([("_Z6cuda_cPf".to_string(), 4)]));
    assert_eq!(all[&exec_child].header.cmdline.last().map(String::as_str), Some("exec-child"));
}

#[test]
fn windows_carry_monotonic_timestamps_that_join_to_the_programs_clock() {
    let (_, run, dir) = run_both(&["sleep", "500"], &[("BACKSCOPE_TRACE_INTERVAL_MS", "10")]);
    let trace = only_trace(dir.path(), run.pid);
    assert_eq!(trace.header.clock, "monotonic");
    assert_eq!(trace.header.interval_ms, 10);
    assert_windows_well_formed(&trace);
    let phase = |name: &str| -> (u64, u64) {
        let line = run.stdout.lines().find(|l| l.starts_with(&format!("phase {name} "))).unwrap();
        let v: Vec<u64> = line.split_whitespace().skip(2).map(|x| x.parse().unwrap()).collect();
        (v[0], v[1])
    };
    let (a0, a1) = phase("a");
    let (b0, b1) = phase("b");
    let id = |name: &str| trace.kernels.values().find(|k| k.name == name).unwrap().id;
    let (ka, kb) = (id("_Z12hip_kernel_av"), id("_Z12hip_kernel_bPfi"));
    let windows_of = |k: u32| trace.windows.iter().filter(move |w| w.counts.iter().any(|&(id, _)| id == k));
    // Each launch phase lands in windows that cover it, and the 300 ms pause separates them.
    for w in windows_of(ka) {
        assert!(w.t1 >= a0 && w.t0 <= a1, "window {w:?} does not cover phase a [{a0}, {a1}]");
        assert!(w.t1 < b0, "phase a counted in a window reaching into phase b");
    }
    for w in windows_of(kb) {
        assert!(w.t1 >= b0 && w.t0 <= b1, "window {w:?} does not cover phase b [{b0}, {b1}]");
    }
    let launches_in =
        |range: Range, k: u32| trace.kernel_stats(range).into_iter().find(|s| s.ids == [k]).unwrap().launches;
    assert_eq!(launches_in(Range::Overlapping(a0, a1), ka), 5);
    assert_eq!(launches_in(Range::Overlapping(b0, b1), kb), 7);
    assert_eq!(trace.total_launches(Range::Within(a1 + 50_000_000, b0)), 0);
}

/// The `…StreamIsCapturing` calls the program saw in one phase (it prints them on stderr).
fn capture_queries(stderr: &str, phase: &str) -> u64 {
    let prefix = format!("is-capturing queries {phase} ");
    let line = stderr.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {phase} in {stderr}"));
    line.trim().parse().unwrap()
}

/// `stale_capture_scenario` of fake_backend.c: captures that end where no hook sees them (the
/// runtime's own `…StreamEndCapture` found with dlsym), a stream destroyed after that, a stream
/// captured again, and per-thread default streams of two threads. With x and y the scenario's two
/// kernels, the scenario's own description gives what a correct observer reports:
/// * x: 3 launches on P after the unseen end, 10 on R, 3 replays of the re-captured graph (grid 3),
///   4 on the other thread's per-thread stream and 5 on R: 25 executions, 3 of them replays;
///   captured 2 (first capture) + 1 (re-capture);
/// * y: captured on Q, on P before the unseen end and on the per-thread stream (grid 5), whose graph
///   is replayed twice: 2 executions, 3 captured;
/// * the graph of the first capture was never seen: its 2 replays are unknown graph launches, and the
///   runtime executed x 4 more times than the trace can show;
/// * three records expire: P at its next launch, Q when destroyed, P again when captured anew.
fn check_stale_captures(mode: &str, x: &str, y: &str) {
    let (_, run, dir) = run_both(&[mode], &[]);
    let trace = only_trace(dir.path(), run.pid);
    let fake = fake_counts(&run.stdout);
    assert_eq!(fake[x], (29, 0), "the runtime's count of {x}");
    assert_eq!(fake[y], (2, 0), "the runtime's count of {y}");
    let observed = by_name(&trace);
    let (kx, ky) = (&observed[x], &observed[y]);
    assert_eq!((kx.launches, kx.graph, kx.captured), (25, 3, 3), "{x}");
    assert_eq!((ky.launches, ky.graph, ky.captured), (2, 2, 3), "{y}");
    assert_eq!(shapes_of(kx).get(&shape([3, 1, 1], [1, 1, 1])), Some(&3), "replays of the re-capture");
    assert_eq!(shapes_of(ky), BTreeMap::from([(shape([5, 1, 1], [1, 1, 1]), 2)]));
    let sum = |f: fn(&crate::trace::Window) -> u64| trace.windows.iter().map(f).sum::<u64>();
    assert_eq!(sum(|w| w.unknown_graph_launches), 2);
    assert_eq!(sum(|w| w.graph_launches), 7);
    assert_eq!(sum(|w| w.expired_captures), 3);
    assert!(trace.warnings.iter().any(|w| w.code == "stale_capture"), "{:?}", trace.warnings);
    // While Q's stale record lived, each launch on R asked whether R joined a capture; once Q was
    // destroyed, no capture was active and launches took the plain path (no query, no lock).
    assert_eq!(capture_queries(&run.stderr, "while-q-stale"), 5);
    assert_eq!(capture_queries(&run.stderr, "after-q-destroyed"), 0);
    assert_eq!(capture_queries(&run.stderr, "at-the-end"), 0);
}

#[test]
fn hip_captures_that_end_unseen_expire() {
    check_stale_captures("stale-capture-hip", "_Z12hip_kernel_av", "_Z12hip_kernel_bPfi");
}

#[test]
fn cuda_captures_that_end_unseen_expire() {
    check_stale_captures("stale-capture-cuda", "_Z6cuda_cPf", "_Z6cuda_dv");
}
