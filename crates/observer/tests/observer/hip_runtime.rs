//! The observer against the real HIP runtime (Debian's hipcc and libamdhip64). There is no GPU on
//! the test machine: static initialisation still registers the fat binary and its kernels, and
//! `hipLaunchKernel` returns an error, which the program prints and the observer counts.
//!
//! Expected values come from outside the observer: kernel names from the device code objects'
//! AMDGPU metadata (`llvm-readelf --notes` on the bundle that `clang-offload-bundler` extracts from
//! `.hip_fatbin`) and, cross-checked, from the host-side kernel handle symbols (`nm`); launch counts,
//! shapes and return codes from the program's own output without the observer.
//!
//! Needs `hipcc`, `objcopy`, `nm`, `clang-offload-bundler(-15)`, `llvm-readelf(-15)` and
//! `llvm-cxxfilt(-15)` or `c++filt`. Set `BACKSCOPE_SKIP_HIP_TESTS=1` to skip on a machine without
//! them (the test fails otherwise, so that a missing toolchain cannot pass silently).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::*;
use crate::trace::Shape;

fn tool(candidates: &[&str]) -> String {
    for name in candidates {
        if Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return name.to_string();
        }
    }
    panic!("none of {candidates:?} is installed (BACKSCOPE_SKIP_HIP_TESTS=1 skips this test)");
}

fn stdout_of(program: &str, args: &[&OsStr]) -> String {
    let output = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(output.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// The HIP program, built once for this test binary.
fn hip_program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let dir = build_dir("observer-hip");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/kernels.hip");
        let program = dir.join("hip_kernels");
        let hipcc = tool(&["hipcc"]);
        build_with_tmp(
            &hipcc,
            &[OsStr::new("--offload-arch=gfx900"), source.as_os_str(), OsStr::new("-o"), program.as_os_str()],
            &dir,
        );
        program
    })
}

/// Kernel names from the device code object's metadata notes.
fn device_kernel_names(program: &Path) -> BTreeSet<String> {
    let dir = program.parent().unwrap();
    let fatbin = dir.join("hip_fatbin.bin");
    let code_object = dir.join("gfx900.co");
    build(
        "objcopy",
        &[
            OsStr::new("-O"),
            OsStr::new("binary"),
            OsStr::new("--only-section=.hip_fatbin"),
            program.as_os_str(),
            fatbin.as_os_str(),
        ],
    );
    let input = format!("--input={}", fatbin.display());
    let output = format!("--output={}", code_object.display());
    build(
        &tool(&["clang-offload-bundler-15", "clang-offload-bundler"]),
        &[
            OsStr::new("--unbundle"),
            OsStr::new("--type=o"),
            OsStr::new("--targets=hipv4-amdgcn-amd-amdhsa--gfx900"),
            OsStr::new(&input),
            OsStr::new(&output),
        ],
    );
    let notes =
        stdout_of(&tool(&["llvm-readelf-15", "llvm-readelf"]), &[OsStr::new("--notes"), code_object.as_os_str()]);
    notes.lines().filter_map(|l| l.trim().strip_prefix(".name:")).map(|n| n.trim().to_string()).collect()
}

/// Kernel handle symbols of the host side: HIP-Clang emits one data object per kernel, named with
/// the kernel's mangled name, whose address is what registration and launches pass.
fn host_handle_names(program: &Path) -> BTreeSet<String> {
    stdout_of("nm", &[program.as_os_str()])
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            match fields.as_slice() {
                [_, kind, name] if ["D", "d", "V", "R", "r"].contains(kind) && name.starts_with("_Z") => {
                    Some(name.to_string())
                }
                _ => None,
            }
        })
        .collect()
}

/// Source-level name (before `(` and template arguments) of a mangled kernel name.
fn source_name(mangled: &str) -> String {
    let demangler = tool(&["llvm-cxxfilt-15", "llvm-cxxfilt", "c++filt"]);
    let demangled = stdout_of(&demangler, &[OsStr::new(mangled)]);
    // "add_one(float*, int)", "void scale_by<3>(float*)": the identifier before the parameters or
    // template arguments, after a return type if any.
    let head = demangled.trim().split(['(', '<']).next().unwrap();
    head.rsplit(' ').next().unwrap().to_string()
}

/// The program's own account of its launches: label -> (calls, failed calls, shapes).
fn printed_launches(stdout: &str) -> BTreeMap<String, (u64, u64, BTreeMap<Shape, u64>)> {
    let mut out: BTreeMap<String, (u64, u64, BTreeMap<Shape, u64>)> = BTreeMap::new();
    for line in stdout.lines().filter_map(|l| l.strip_prefix("launch ")) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let value = |key: &str| fields.iter().find_map(|f| f.strip_prefix(key)).unwrap();
        let dims = |key: &str| -> [u32; 3] {
            let v: Vec<u32> = value(key).split(',').map(|x| x.parse().unwrap()).collect();
            [v[0], v[1], v[2]]
        };
        let rc: i32 = value("rc=").parse().unwrap();
        let entry = out.entry(fields[0].to_string()).or_default();
        entry.0 += 1;
        entry.1 += u64::from(rc != 0);
        *entry.2.entry(Shape { grid: dims("grid="), block: dims("block=") }).or_insert(0) += 1;
    }
    out
}

#[test]
fn real_hip_runtime_registrations_and_launches_are_observed_without_changing_the_program() {
    if std::env::var_os("BACKSCOPE_SKIP_HIP_TESTS").is_some_and(|v| v == "1") {
        eprintln!("skipped: BACKSCOPE_SKIP_HIP_TESTS=1");
        return;
    }
    let program = hip_program();
    let dir = TempDir::new("hip");
    let baseline = run(program, &[], &Setup::plain());
    let observed = run(program, &[], &Setup::traced(dir.path()));

    // The program is unchanged: exit status, every printed status code, nothing on stderr from us.
    assert_eq!(observed.status.code(), baseline.status.code());
    assert_eq!(observed.stdout, baseline.stdout);
    assert!(observer_lines(&observed.stderr).is_empty(), "{}", observed.stderr);
    assert!(baseline.stdout.contains("done"), "{}", baseline.stdout);

    // Registration: exactly the kernels of the device code, under their mangled names.
    let device_names = device_kernel_names(program);
    assert_eq!(device_names.len(), 3, "{device_names:?}");
    assert_eq!(host_handle_names(program), device_names, "nm and the device metadata disagree");
    let trace = only_trace(dir.path(), observed.pid);
    let registered: BTreeSet<String> =
        trace.kernels.values().filter(|k| k.api == "hip" && k.source == "register").map(|k| k.name.clone()).collect();
    assert_eq!(registered, device_names);

    // Launches: counts, failures and shapes as the program printed them.
    let printed = printed_launches(&baseline.stdout);
    assert_eq!(printed.values().map(|p| p.0).sum::<u64>(), 9, "{printed:?}");
    // The stream calls (begin/end capture, is-capturing, destroy) reached the runtime, whose codes
    // the program printed the same with and without the observer (compared above); they failed,
    // so no capture was recorded and every launch counts as executed.
    assert_eq!(baseline.stdout.lines().filter(|l| l.starts_with("stream ")).count(), 4);
    let observed_by_name = by_name(&trace);
    for name in &device_names {
        let stats = &observed_by_name[name];
        match printed.get(&source_name(name)) {
            Some((calls, failed, shapes)) => {
                assert_eq!((stats.launches, stats.errors, stats.captured), (*calls, *failed, 0), "{name}");
                assert_eq!(stats.shapes.iter().copied().collect::<BTreeMap<_, _>>(), *shapes, "{name}");
            }
            None => assert_eq!(stats.launches, 0, "{name} was never launched"),
        }
    }
}
