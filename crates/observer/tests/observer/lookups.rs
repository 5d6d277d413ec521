//! Launches that reach the driver through function pointers: `cuGetProcAddress(_v2)` and `dlsym` on the
//! driver's handle (cuBLAS's static runtime), `hipGetProcAddress` (rocBLAS), and the runtime's
//! `cudaGetDriverEntryPoint(ByVersion)`. The expected counts are the test-double runtime's own (it prints
//! what it executed per kernel); every other lookup must return what it returns without the observer.

use crate::common::*;
use crate::trace::Shape;

/// Runs `host ARGS` plainly and traced: same exit status and output, no observer complaint.
fn run_both(args: &[&str]) -> (Run, TempDir) {
    let programs = fake_programs();
    let dir = TempDir::new(args[0]);
    let baseline = run(&programs.host, args, &Setup::plain());
    let observed = run(&programs.host, args, &Setup::traced(dir.path()));
    assert!(baseline.status.success(), "{baseline:?}");
    assert_eq!(observed.status.code(), baseline.status.code(), "{observed:?}");
    assert_eq!(observed.stdout, baseline.stdout, "the program's output changed under the observer");
    assert!(observer_lines(&observed.stderr).is_empty(), "{}", observed.stderr);
    (observed, dir)
}

#[test]
fn vendor_blas_launches_through_driver_pointers_are_counted_and_named() {
    let (run, dir) = run_both(&["blas", "3"]);
    let trace = only_trace(dir.path(), run.pid);
    let by = by_name(&trace);
    let expected = fake_counts(&run.stdout);
    let launched: Vec<(&String, &(u64, u64))> = expected.iter().filter(|(_, (executed, _))| *executed > 0).collect();
    assert_eq!(launched.len(), 5, "{expected:?}");
    for (name, (executed, failed)) in launched {
        let stats = by.get(name).unwrap_or_else(|| panic!("{name} not in the trace: {:?}", by.keys()));
        assert_eq!((stats.launches, stats.errors), (*executed, *failed), "{name}");
    }
    // Named by the runtime at their first launch (they were created through a pointer, not a hook).
    let gemm = trace.kernels.values().find(|k| k.name.starts_with("sm90_xmma_gemm")).unwrap();
    assert_eq!((gemm.api.as_str(), gemm.source.as_str()), ("cu", "runtime"));
    let tensile = trace.kernels.values().find(|k| k.name.starts_with("Cijk_Ailk")).unwrap();
    assert_eq!((tensile.api.as_str(), tensile.source.as_str()), ("hip_module", "runtime"));
    // Shapes as launched: fake_blas.c's grids and blocks; hipExtModuleLaunchKernel's global sizes in blocks.
    let shapes = |prefix: &str| by.iter().find(|(n, _)| n.starts_with(prefix)).unwrap().1.shapes.clone();
    assert_eq!(shapes("sm90_xmma"), [(Shape { grid: [4, 4, 1], block: [128, 1, 1] }, 3)]);
    assert_eq!(shapes("cutlass_80"), [(Shape { grid: [2, 2, 1], block: [64, 1, 1] }, 6)]);
    assert_eq!(shapes("Cijk_Ailk"), [(Shape { grid: [1, 128, 1], block: [256, 1, 1] }, 3)]);
    assert_eq!(shapes("_ZN8cublasLt"), [(Shape { grid: [1, 1, 1], block: [32, 1, 1] }, 1)]);
}

#[test]
fn driver_entry_points_from_the_runtime_are_unchanged_except_launches() {
    // The program prints `unchanged=yes` when a non-launch pointer equals the runtime's own, calls each,
    // and run_both requires the same output with the observer.
    let (run, dir) = run_both(&["entry-points"]);
    assert_eq!(run.stdout.matches("unchanged=yes").count(), 2, "{}", run.stdout);
    assert!(run.stdout.contains("entry cuNoSuchFunction rc=500 status=1 pointer=(nil)"), "{}", run.stdout);
    let trace = only_trace(dir.path(), run.pid);
    let expected = fake_counts(&run.stdout)["entry_point_kernel"];
    let stats = &by_name(&trace)["entry_point_kernel"];
    assert_eq!((stats.launches, stats.errors), expected);
    assert_eq!(stats.launches, 4, "3 through cuLaunchKernel, 1 through cuLaunchKernelEx");
}

#[test]
fn rtld_next_still_means_the_object_after_the_caller() {
    let program = fake_programs().dir.join("next_main");
    let dir = TempDir::new("next");
    let plain = run(&program, &[], &Setup::plain());
    let observed = run(&program, &[], &Setup::traced(dir.path()));
    // next_first's next_probe adds 10 to the next one's 2.
    assert_eq!(plain.stdout.trim(), "next_probe=12");
    assert_eq!(observed.stdout, plain.stdout, "{}", observed.stderr);
    assert!(observed.status.success());
}
