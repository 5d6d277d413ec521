//! Shared test plumbing: locating the observer, building the C programs, running children with a
//! deadline, reading traces.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::trace::{self, Range, TraceFile};

/// Deadline for one child process: far above what any scenario needs (a few seconds at most), so
/// reaching it means a hang or deadlock.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// The observer library under test.
///
/// Cargo builds the package's library (both crate types, `cdylib` included) before it builds an
/// integration test, into the same `target/<profile>/deps` directory that holds the test binary,
/// and links a copy into `target/<profile>/`. So the library is found next to the running test,
/// whatever `CARGO_TARGET_DIR` or profile is in use, and is always the one built from the sources
/// under test. `BACKSCOPE_OBSERVER_SO` overrides this (e.g. to test a release build).
pub fn observer_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(path) = std::env::var_os("BACKSCOPE_OBSERVER_SO") {
            return PathBuf::from(path);
        }
        let exe = std::env::current_exe().expect("test executable path");
        let deps = exe.parent().expect("deps directory");
        let candidates = [deps.join("libbackscope_observer.so"), deps.join("../libbackscope_observer.so")];
        candidates
            .iter()
            .find(|p| p.is_file())
            .cloned()
            .unwrap_or_else(|| panic!("libbackscope_observer.so not found in {candidates:?}"))
    })
}

/// Scratch directory under cargo's per-target temp dir, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("observer-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

/// Runs a build command; panics with its output if it fails.
pub fn build(program: &str, args: &[&OsStr]) {
    built(Command::new(program).args(args), program, args);
}

/// [`build`] with `$TMPDIR` set to `tmp`, for a tool that leaves files in its temporary directory (hipcc leaves two
/// empty directories named after its source per compile).
pub fn build_with_tmp(program: &str, args: &[&OsStr], tmp: &Path) {
    built(Command::new(program).args(args).env("TMPDIR", tmp), program, args);
}

fn built(cmd: &mut Command, program: &str, args: &[&OsStr]) {
    let output = cmd.output().unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A build directory for this test process (`<prefix>-<pid>` under cargo's target temp dir), so that
/// concurrent `cargo test` runs do not interfere; those left by earlier runs whose process is gone
/// are removed.
pub fn build_dir(prefix: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid =
                name.strip_prefix(prefix).and_then(|rest| rest.strip_prefix('-')).and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = root.join(format!("{prefix}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create build dir");
    dir
}

/// The C test programs: `host`, `libfake_backend.so`, `libfake_runtime.so` (the test double).
pub struct FakePrograms {
    pub dir: PathBuf,
    pub host: PathBuf,
}

pub fn fake_programs() -> &'static FakePrograms {
    static PROGRAMS: OnceLock<FakePrograms> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let dir = build_dir("observer-c");
        let src = c_dir();
        let os = |s: &Path| s.as_os_str().to_owned();
        let runtime = dir.join("libfake_runtime.so");
        let backend = dir.join("libfake_backend.so");
        let host = dir.join("host");
        let flags = ["-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-g"].map(OsStr::new);
        let mut args: Vec<&OsStr> = flags.to_vec();
        let (r_src, r_out) = (os(&src.join("fake_runtime.c")), os(&runtime));
        args.extend([OsStr::new("-shared"), OsStr::new("-Wl,-soname,libfake_runtime.so"), OsStr::new("-o")]);
        args.extend([r_out.as_os_str(), r_src.as_os_str(), OsStr::new("-lpthread")]);
        build("gcc", &args);
        let (b_src, b_out, lib_dir) = (os(&src.join("fake_backend.c")), os(&backend), format!("-L{}", dir.display()));
        let mut args: Vec<&OsStr> = flags.to_vec();
        args.extend([OsStr::new("-shared"), OsStr::new("-o"), b_out.as_os_str(), b_src.as_os_str()]);
        args.extend([OsStr::new(&lib_dir), OsStr::new("-lfake_runtime"), OsStr::new("-Wl,-rpath,$ORIGIN")]);
        build("gcc", &args);
        // The vendor-BLAS stand-in links no runtime: it dlopens the driver itself.
        let (blas_src, blas_out) = (os(&src.join("fake_blas.c")), os(&dir.join("libfake_blas.so")));
        let mut args: Vec<&OsStr> = flags.to_vec();
        args.extend([OsStr::new("-shared"), OsStr::new("-o"), blas_out.as_os_str(), blas_src.as_os_str()]);
        args.push(OsStr::new("-ldl"));
        build("gcc", &args);
        // The RTLD_NEXT probe: next_main linked with libnext_first.so before libnext_second.so.
        for part in ["next_first", "next_second"] {
            let (part_src, part_out) = (os(&src.join(format!("{part}.c"))), os(&dir.join(format!("lib{part}.so"))));
            let soname = format!("-Wl,-soname,lib{part}.so");
            let mut args: Vec<&OsStr> = flags.to_vec();
            args.extend([OsStr::new("-shared"), OsStr::new(&soname), OsStr::new("-o"), part_out.as_os_str()]);
            args.extend([part_src.as_os_str(), OsStr::new("-ldl")]);
            build("gcc", &args);
        }
        let (next_src, next_out, lib_dir) =
            (os(&src.join("next_main.c")), os(&dir.join("next_main")), format!("-L{}", dir.display()));
        let mut args: Vec<&OsStr> = flags.to_vec();
        args.extend([OsStr::new("-o"), next_out.as_os_str(), next_src.as_os_str(), OsStr::new(&lib_dir)]);
        // --no-as-needed: the second library defines nothing the program uses itself, yet must be loaded.
        args.extend([OsStr::new("-Wl,--no-as-needed"), OsStr::new("-lnext_first"), OsStr::new("-lnext_second")]);
        args.push(OsStr::new("-Wl,-rpath,$ORIGIN"));
        build("gcc", &args);
        let (h_src, h_out) = (os(&src.join("host.c")), os(&host));
        let mut args: Vec<&OsStr> = flags.to_vec();
        args.extend([
            OsStr::new("-o"),
            h_out.as_os_str(),
            h_src.as_os_str(),
            OsStr::new("-ldl"),
            OsStr::new("-lpthread"),
        ]);
        build("gcc", &args);
        FakePrograms { dir, host }
    })
}

/// What a finished child left behind.
#[derive(Debug)]
pub struct Run {
    pub pid: u32,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// CLOCK_MONOTONIC ns just before the spawn and just after the exit.
    pub started_ns: u64,
    pub ended_ns: u64,
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How a program is run.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    /// `Some(dir)`: under the observer, tracing into `dir` (`BACKSCOPE_TRACE_DIR`).
    pub trace_dir: Option<PathBuf>,
    /// Under the observer with exactly these extra variables (for fault tests).
    pub observer_env: Vec<(String, String)>,
    pub observe: bool,
    pub env: Vec<(String, String)>,
    /// `RLIMIT_FSIZE` for the child, with `SIGXFSZ` ignored: a write past this size fails with
    /// EFBIG, as a write to a full disk fails with ENOSPC.
    pub file_size_limit: Option<u64>,
}

impl Setup {
    pub fn plain() -> Setup {
        Setup::default()
    }

    pub fn traced(dir: &Path) -> Setup {
        Setup { trace_dir: Some(dir.to_path_buf()), observe: true, ..Setup::default() }
    }

    pub fn observed_with(vars: &[(&str, &str)]) -> Setup {
        Setup {
            observe: true,
            observer_env: vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Setup::default()
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Setup {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn file_size_limit(mut self, bytes: u64) -> Setup {
        self.file_size_limit = Some(bytes);
        self
    }
}

/// Runs `program args` to completion within [`DEADLINE`], in its own process group (killed as a
/// group if the deadline passes, so forked grandchildren cannot outlive the test).
pub fn run(program: &Path, args: &[&str], setup: &Setup) -> Run {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    cmd.env_remove("LD_PRELOAD");
    for var in format::env::ALL {
        cmd.env_remove(var.name());
    }
    cmd.env("FAKE_LIB_DIR", &fake_programs().dir);
    if setup.observe {
        cmd.env("LD_PRELOAD", observer_lib());
    }
    if let Some(dir) = &setup.trace_dir {
        cmd.env("BACKSCOPE_TRACE_DIR", dir);
    }
    for (k, v) in setup.observer_env.iter().chain(&setup.env) {
        cmd.env(k, v);
    }
    if let Some(limit) = setup.file_size_limit {
        let limit = libc::rlimit { rlim_cur: limit, rlim_max: limit };
        // SAFETY: runs in the forked child before exec; setrlimit and signal are async-signal-safe
        // and touch only the child.
        unsafe {
            cmd.pre_exec(move || {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let started_ns = monotonic_ns();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            // SAFETY: signals the process group this test created for the child (pgid = its pid).
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("{} {args:?} did not finish within {DEADLINE:?} (hang or deadlock)", program.display());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let ended_ns = monotonic_ns();
    Run { pid, status, stdout: out.join().unwrap(), stderr: err.join().unwrap(), started_ns, ended_ns }
}

/// All traces in `dir`, keyed by pid; every file must be readable.
pub fn traces(dir: &Path) -> BTreeMap<u32, TraceFile> {
    let read = trace::read_dir(dir).unwrap();
    assert!(read.problems.is_empty(), "unreadable traces: {:?}", read.problems);
    read.traces.into_iter().map(|t| (t.pid(), t)).collect()
}

/// The only trace in `dir`, which must belong to `pid` and be complete.
pub fn only_trace(dir: &Path, pid: u32) -> TraceFile {
    let all = traces(dir);
    assert_eq!(all.keys().copied().collect::<Vec<_>>(), [pid], "expected exactly one trace, of pid {pid}");
    let trace = all.into_values().next().unwrap();
    assert!(trace.is_complete(), "trace of {pid} has no end record");
    assert!(!trace.partial_last_line && !trace.is_cut());
    assert_eq!(trace.path.as_ref().unwrap().file_name().unwrap().to_str().unwrap(), format!("trace-{pid}.jsonl"));
    trace
}

/// Totals per kernel name (over all APIs) in a trace.
pub fn by_name(trace: &TraceFile) -> BTreeMap<String, trace::KernelStats> {
    trace.stats_by_name(Range::All).into_iter().map(|((_, name), stats)| (name, stats)).collect()
}

/// The fake runtime's own account: name -> (executed, failed). (Its argument hash is checked by
/// comparing whole outputs with and without the observer.)
pub fn fake_counts(stdout: &str) -> BTreeMap<String, (u64, u64)> {
    stdout
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("fake ")?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            match fields.as_slice() {
                [name, "executed", executed, "failed", failed, "argsum", _] => {
                    Some((name.to_string(), (executed.parse().ok()?, failed.parse().ok()?)))
                }
                _ => None,
            }
        })
        .collect()
}

/// Lines of the observer on stderr.
pub fn observer_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("backscope-observer")).collect()
}

/// Windows are ordered, do not overlap, and lie within the process's life.
pub fn assert_windows_well_formed(trace: &TraceFile) {
    let mut previous_end = trace.header.start_ns;
    for w in &trace.windows {
        assert!(w.t0 >= previous_end, "window {w:?} starts before the previous one ended ({previous_end})");
        assert!(w.t1 >= w.t0);
        previous_end = w.t1;
    }
    if let Some(end) = &trace.end {
        assert!(end.end_ns >= previous_end);
    }
}
