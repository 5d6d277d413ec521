//! `backscope trace` on a real HIP program (Debian's hipcc and HIP runtime, no GPU): the observer sees the
//! registrations and every launch; the counts must equal the program's own account of its launches.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::support::util::*;

#[test]
fn trace_counts_match_the_programs_own_launch_log() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/observer/tests/c/kernels.hip");
    let exe = tmp.path().join("kernels");
    stdout_ok(hipcc().arg("--offload-arch=gfx900").arg(&src).arg("-o").arg(&exe));
    let plain = stdout_ok(&mut Command::new(&exe));

    let observer = observer_library();
    let dir = tmp.path().join("traces");
    let out = run(backscope()
        .args(["trace", "--json", "--observer"])
        .arg(&observer)
        .arg("--dir")
        .arg(&dir)
        .arg("--")
        .arg(&exe));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    // The traced program's own output comes first, unchanged; the summary is the last line.
    let (program_output, summary) = text.trim_end().rsplit_once('\n').unwrap();
    assert_eq!(program_output.trim_end(), plain.trim_end(), "the observer must not change the program's behaviour");
    let summary: serde_json::Value = serde_json::from_str(summary).unwrap();

    // The program prints one line per launch: "launch <label> grid=… block=… rc=<status>".
    let mut expected: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in plain.lines().filter(|l| l.starts_with("launch ")) {
        let label = line.split_whitespace().nth(1).unwrap().to_string();
        let failed = !line.ends_with("rc=0");
        let e = expected.entry(label).or_default();
        e.0 += 1;
        e.1 += u64::from(failed);
    }
    let kernels = summary["kernels"].as_array().unwrap();
    for (label, (launches, failed)) in &expected {
        let k = kernels
            .iter()
            .find(|k| k["demangled"].as_str().unwrap().starts_with(label.as_str()))
            .unwrap_or_else(|| panic!("{label} not observed: {kernels:?}"));
        assert_eq!(k["launches"].as_u64(), Some(*launches), "{label}");
        assert_eq!(k["errors"].as_u64(), Some(*failed), "{label}");
    }
    assert_eq!(kernels.len(), expected.len(), "never_launched is registered but must not be listed");
    assert_eq!(summary["claims"][0]["confidence"], "Confirmed");
    assert!(summary["claims"][0]["sources"][0]["path"].as_str().unwrap().starts_with(dir.to_str().unwrap()));

    // The trace directory must be new or empty: traces of two runs must never mix.
    let out = run(backscope().args(["trace", "--observer"]).arg(&observer).arg("--dir").arg(&dir).arg("--").arg(&exe));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
}

#[test]
fn trace_env_prints_a_systemd_drop_in() {
    let observer = observer_library();
    let text = stdout_ok(
        backscope()
            .args(["trace", "--env", "--systemd", "ollama.service", "--dir", "/var/tmp/bt", "--observer"])
            .arg(&observer),
    );
    assert!(text.contains("[Service]"));
    assert!(text.contains("Environment=\"BACKSCOPE_TRACE_DIR=/var/tmp/bt\""));
    assert!(text.contains(&format!("Environment=\"LD_PRELOAD={}\"", observer.canonicalize().unwrap().display())));
    // A service left traced for days: its trace bounded by a ring of 4 segment files within the 1 GiB budget, in
    // 1 s windows.
    for line in ["BACKSCOPE_TRACE_MAX_BYTES=1G", "BACKSCOPE_TRACE_ROTATE=4", "BACKSCOPE_TRACE_INTERVAL_MS=1000"] {
        assert!(text.contains(&format!("Environment=\"{line}\"")), "{line}: {text}");
    }
    assert!(text.contains("rotates through 4 files of 256M") && text.contains("at least its newest 768M"), "{text}");
    // Asked otherwise: the trace stops at its budget, and says that a crash after it is not recorded.
    let text = stdout_ok(
        backscope()
            .args(["trace", "--env", "--dir", "/var/tmp/bt", "--rotate", "1", "--max-bytes", "64M", "--interval-ms"])
            .args(["200", "--observer"])
            .arg(&observer),
    );
    assert!(
        text.contains("export BACKSCOPE_TRACE_MAX_BYTES=64M\n") && !text.contains("BACKSCOPE_TRACE_ROTATE"),
        "{text}"
    );
    assert!(
        text.contains("export BACKSCOPE_TRACE_INTERVAL_MS=200\n") && text.contains("a crash included, is not recorded")
    );
    let json: serde_json::Value = serde_json::from_str(&stdout_ok(
        backscope().args(["trace", "--env", "--json", "--dir", "/var/tmp/bt", "--observer"]).arg(&observer),
    ))
    .unwrap();
    assert_eq!(
        (&json["variables"]["BACKSCOPE_TRACE_ROTATE"], &json["variables"]["BACKSCOPE_TRACE_MAX_BYTES"]),
        (&"4".into(), &"1G".into())
    );
    let out = run(backscope().args(["trace", "--env", "--max-bytes", "lots", "--observer"]).arg(&observer));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"lots\" is not a byte count"));
}

/// The observer's C test programs (`crates/observer/tests/c`: a host that dlopens a backend linked
/// against a test-double runtime), built once for this test binary. Returns the directory, which the
/// host needs in `FAKE_LIB_DIR`.
fn fake_programs() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/observer/tests/c");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("trace-cli-c-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let gcc = |args: &[&std::ffi::OsStr]| {
            let mut cmd = Command::new("gcc");
            cmd.args(["-O2", "-fPIC", "-Wall", "-Werror"]).args(args);
            stdout_ok(&mut cmd);
        };
        let (runtime, backend, host) =
            (dir.join("libfake_runtime.so"), dir.join("libfake_backend.so"), dir.join("host"));
        let lib_dir = format!("-L{}", dir.display());
        gcc(&[
            "-shared".as_ref(),
            "-Wl,-soname,libfake_runtime.so".as_ref(),
            "-o".as_ref(),
            runtime.as_ref(),
            src.join("fake_runtime.c").as_ref(),
            "-lpthread".as_ref(),
        ]);
        gcc(&[
            "-shared".as_ref(),
            "-o".as_ref(),
            backend.as_ref(),
            src.join("fake_backend.c").as_ref(),
            lib_dir.as_ref(),
            "-lfake_runtime".as_ref(),
            "-Wl,-rpath,$ORIGIN".as_ref(),
        ]);
        gcc(&["-o".as_ref(), host.as_ref(), src.join("host.c").as_ref(), "-ldl".as_ref(), "-lpthread".as_ref()]);
        // The vendor-BLAS stand-in, which dlopens the runtime itself and launches through its pointers.
        let blas = dir.join("libfake_blas.so");
        gcc(&["-shared".as_ref(), "-o".as_ref(), blas.as_ref(), src.join("fake_blas.c").as_ref(), "-ldl".as_ref()]);
        dir
    })
}

/// `backscope trace --json --dir DIR -- host ARGS…` with the observer under test; returns the output.
fn trace_host(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = backscope();
    cmd.args(["trace", "--json", "--observer"]).arg(observer_library()).arg("--dir").arg(dir);
    cmd.arg("--").arg(fake_programs().join("host")).args(args).env("FAKE_LIB_DIR", fake_programs());
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd)
}

/// The JSON summary: the last line of stdout (the traced program's own output comes first).
fn summary_of(out: &std::process::Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim_end().rsplit('\n').next().unwrap()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn claim<'a>(summary: &'a serde_json::Value, id: &str) -> Option<&'a serde_json::Value> {
    summary["claims"].as_array().unwrap().iter().find(|c| c["id"] == id)
}

fn launches_by_name(summary: &serde_json::Value) -> BTreeMap<String, u64> {
    summary["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["name"].as_str().unwrap().to_string(), k["launches"].as_u64().unwrap()))
        .collect()
}

#[test]
fn read_reports_a_bad_trace_file_and_keeps_the_good_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("traces");
    // A parent, a forked child and a fork+exec child: three real traces.
    let out = trace_host(&dir, &["fork"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let traced = summary_of(&out);
    assert_eq!(traced["processes"].as_array().unwrap().len(), 3);
    // A fourth file, broken on its third line.
    let good = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let text = std::fs::read_to_string(&good).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = r#"{"window":[1,"#;
    let bad = dir.join("trace-999999.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();

    let out = run(backscope().args(["trace", "--json", "--read"]).arg(&dir));
    assert_eq!(out.status.code(), Some(1), "finished with problems: {}", String::from_utf8_lossy(&out.stderr));
    let read = summary_of(&out);
    assert_eq!(launches_by_name(&read), launches_by_name(&traced), "the good traces are all counted");
    assert_eq!(read["processes"].as_array().unwrap().len(), 3);
    let problems = read["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0]["file"], bad.display().to_string());
    assert_eq!(problems[0]["line"], 3);
    assert!(problems[0]["message"].as_str().unwrap().starts_with("not JSON"), "{problems:?}");
    let unreadable = claim(&read, "trace.unreadable").expect("a claim about the unreadable file");
    assert_eq!(unreadable["confidence"], "Limited");
    assert_eq!(claim(&read, "trace.total").unwrap()["confidence"], "Confirmed");
    // The text report names the file and line too.
    let out = run(backscope().args(["trace", "--read"]).arg(&dir));
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("{}:3: not JSON", bad.display())), "{text}");
}

/// What a cut trace must look like in the summary: counts flagged as lower bounds, "at least" in the
/// claims, a Limited confidence, the reason named, and no talk of a killed process.
fn assert_cut_summary(summary: &serde_json::Value, why: &str) {
    assert_eq!(summary["counts_are_lower_bounds"], true);
    let cut = summary["processes"][0]["cut"].as_str().unwrap_or_else(|| panic!("no cut: {summary}"));
    assert!(cut.contains(why), "{cut:?} does not say {why:?}");
    let total = claim(summary, "trace.total").unwrap();
    assert_eq!(total["confidence"], "Limited");
    assert!(total["statement"].as_str().unwrap().starts_with("at least "), "{total}");
    let cut_claim = claim(summary, "trace.cut").unwrap();
    assert_eq!(cut_claim["confidence"], "Limited");
    assert!(cut_claim["statement"].as_str().unwrap().contains(why), "{cut_claim}");
    assert!(claim(summary, "trace.incomplete").is_none(), "a cut trace is not a killed process: {summary}");
    assert!(!summary.to_string().contains("killed or crashed"));
}

#[test]
fn a_trace_cut_by_its_byte_budget_gives_lower_bounds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("traces");
    // 3,000 kernels, 6,000 launches: the definitions alone pass 16 KiB.
    let out = trace_host(&dir, &["many", "3000"], &[("BACKSCOPE_TRACE_MAX_BYTES", "16K")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let program_launches: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("many kernels=3000 launches="))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("the program's own launch count");
    let summary = summary_of(&out);
    assert_cut_summary(&summary, "budget of 16384 bytes");
    let total: u64 = launches_by_name(&summary).values().sum();
    assert!(total < program_launches, "{total} of {program_launches} launches: the cut lost some");
}

#[test]
fn a_trace_cut_by_a_failed_write_gives_lower_bounds() {
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("traces");
    let mut cmd = backscope();
    cmd.args(["trace", "--json", "--interval-ms", "1", "--observer"]).arg(observer_library()).arg("--dir").arg(&dir);
    cmd.arg("--").arg(fake_programs().join("host")).args(["threads", "4", "400000"]);
    cmd.env("FAKE_LIB_DIR", fake_programs());
    // Files may not grow past 8,000 bytes (inherited by the traced program): the trace's write
    // fails with EFBIG, as on a full disk with ENOSPC.
    let limit = libc::rlimit { rlim_cur: 8000, rlim_max: 8000 };
    // SAFETY: runs in the forked child before exec; signal and setrlimit are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("File too large"));
    let summary = summary_of(&out);
    assert_cut_summary(&summary, "writing failed (File too large (os error 27))");
    let total: u64 = launches_by_name(&summary).values().sum();
    assert!(total > 0 && total < 4 * 400_000, "{total}");
}

/// Field 22 of /proc/PID/stat (start time in clock ticks) and the state, or `None` once the process is
/// gone: together with the pid, they tell a process from a later one that reused its pid.
fn proc_start_and_state(pid: u32) -> Option<(u64, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((fields.get(19)?.parse().ok()?, fields.first()?.chars().next()?))
}

/// Whether the process `pid` that started at `start` still runs (a zombie has finished).
fn still_running(pid: u32, start: u64) -> bool {
    matches!(proc_start_and_state(pid), Some((s, state)) if s == start && state != 'Z')
}

/// `backscope trace -- sh -c '…; sleep 300; …'`, then `signal` to backscope: it passes the signal on,
/// the shell and its sleep end, and backscope summarises and exits with the shell's status. With
/// `own_group`, the command is `setsid sh -c …`: the shell leads a process group of its own, which
/// gets the signal as a whole.
fn signal_reaches_the_traced_command(signal: libc::c_int, own_group: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("traces");
    let pid_file = tmp.path().join("sh.pid");
    let script = format!("echo $$ > {}; sleep 300; echo after", pid_file.display());
    let mut child = backscope()
        .args(["trace", "--observer"])
        .arg(observer_library())
        .arg("--dir")
        .arg(&dir)
        .arg("--")
        .args(if own_group { &["setsid"][..] } else { &[][..] })
        .args(["sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).unwrap();
        s
    });
    // Wait for the shell and its sleep.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (sh, sleep) = loop {
        assert!(std::time::Instant::now() < deadline, "the shell and its sleep did not start");
        let sh: Option<u32> = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok());
        let sleep = sh.and_then(|sh| {
            std::fs::read_to_string(format!("/proc/{sh}/task/{sh}/children"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        });
        if let (Some(sh), Some(sleep)) = (sh, sleep) {
            break (sh, sleep);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let sh_start = proc_start_and_state(sh).unwrap().0;
    // SAFETY: getpgid only reads the process table.
    assert_eq!(unsafe { libc::getpgid(sh as libc::pid_t) } == sh as libc::pid_t, own_group);
    let sleep_start = proc_start_and_state(sleep).unwrap().0;
    // SAFETY: signals the backscope process this test started.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("backscope did not finish after the signal");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    assert_eq!(status.code(), Some(128 + signal), "the shell's status (killed by the signal): {stderr}");
    assert_eq!(
        stderr.lines().next(),
        Some(format!("backscope: tracing into {}", dir.display()).as_str()),
        "the directory is named first: {stderr}"
    );
    assert!(stdout.contains("\nClaims\n"), "the summary is printed: {stdout}");
    assert!(
        stdout.contains(&format!(
            "traced command was ended by {} (exit status {}); traces in {}",
            if signal == libc::SIGINT { "SIGINT" } else { "SIGTERM" },
            128 + signal,
            dir.display()
        )),
        "{stdout}"
    );
    assert!(!stdout.contains("after"), "the shell went on after its sleep: {stdout}");
    // No survivors: the shell and its sleep are gone (checked by pid and start time).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while still_running(sh, sh_start) || still_running(sleep, sleep_start) {
        assert!(std::time::Instant::now() < deadline, "pid {sh} (sh) or {sleep} (sleep) survived");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn sigterm_to_trace_reaches_the_command_and_the_summary_follows() {
    signal_reaches_the_traced_command(libc::SIGTERM, false);
}

#[test]
fn sigint_to_trace_reaches_the_command_and_the_summary_follows() {
    signal_reaches_the_traced_command(libc::SIGINT, false);
}

#[test]
fn a_signal_reaches_the_process_group_the_command_leads() {
    signal_reaches_the_traced_command(libc::SIGTERM, true);
}

/// `backscope trace --json` of `program args`, run plainly first: both must end the same way (exit code or signal),
/// with the same stdout. Returns the plain run, the traced run and the summary.
fn crash_plain_and_traced(
    dir: &Path,
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, std::process::Output, serde_json::Value) {
    use std::os::unix::process::ExitStatusExt;
    let mut plain = Command::new(program);
    plain.args(args).envs(env.iter().copied());
    let plain = run(&mut plain);
    let mut cmd = backscope();
    cmd.args(["trace", "--json", "--observer"]).arg(observer_library()).arg("--dir").arg(dir);
    cmd.arg("--").arg(program).args(args).envs(env.iter().copied());
    let traced = run(&mut cmd);
    // `backscope trace` exits with the command's status: 128 + the signal for a command a signal killed.
    let expected = plain.status.code().unwrap_or_else(|| 128 + plain.status.signal().unwrap());
    assert_eq!(traced.status.code(), Some(expected), "{}", String::from_utf8_lossy(&traced.stderr));
    let summary = summary_of(&traced);
    let text = String::from_utf8_lossy(&traced.stdout);
    let program_output = text.trim_end().rsplit_once('\n').map_or("", |(head, _)| head);
    assert_eq!(program_output.trim_end(), String::from_utf8_lossy(&plain.stdout).trim_end());
    (plain, traced, summary)
}

#[test]
fn a_crashing_c_program_dies_as_it_would_and_the_summary_names_the_last_kernels() {
    let host = fake_programs().join("host");
    let env = [("FAKE_LIB_DIR", fake_programs().to_str().unwrap())];
    for (how, signal, sig_name) in [("segv", libc::SIGSEGV, "SIGSEGV"), ("abort", libc::SIGABRT, "SIGABRT")] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("traces");
        let (plain, _, summary) = crash_plain_and_traced(&dir, &host, &["crash", how], &env);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(plain.status.signal(), Some(signal));
        let crash = &summary["crashes"][0];
        assert_eq!((crash["signal"].as_str(), crash["fatal"].as_bool()), (Some(sig_name), Some(true)), "{crash}");
        // host crash: a x3 and b x2 on the main thread (tid = pid), then b x1 on a second thread.
        let main = &crash["threads"][0];
        assert_eq!(main["tid"], crash["pid"]);
        let runs: Vec<(String, u64)> = main["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| (k["name"].as_str().unwrap().to_string(), k["launches"].as_u64().unwrap()))
            .collect();
        // The names fake_backend.c registers.
        assert_eq!(runs, [("_Z12hip_kernel_av".to_string(), 3), ("_Z12hip_kernel_bPfi".to_string(), 2)]);
        assert_eq!(crash["threads"][1]["kernels"][0]["launches"], 1);
        let crash_claim = claim(&summary, "trace.crash").unwrap_or_else(|| panic!("no crash claim: {summary}"));
        assert_eq!(crash_claim["confidence"], "Confirmed");
        let statement = crash_claim["statement"].as_str().unwrap();
        assert!(statement.contains(&format!(" {sig_name}")), "{statement}");
        assert!(statement.contains("the last kernels launched before the crash: thread "), "{statement}");
        assert!(statement.contains("3× hip_kernel_a (other), then 2× hip_kernel_b (other)"), "{statement}");
        assert!(claim(&summary, "trace.incomplete").is_none(), "the crash record's flush left no window missing");
    }
}

/// The Go crash program (`crates/observer/tests/go`): a cgo program shaped like Ollama's runner whose C half
/// (built with hipcc) registers a HIP kernel with the real HIP runtime. Built once for this test binary.
fn go_crash_program() -> &'static Path {
    static PROGRAM: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PROGRAM.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/observer/tests/go");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("go-crash-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let library = dir.join("libgokernel.so");
        stdout_ok(
            hipcc().args(["--offload-arch=gfx900", "-fPIC", "-shared", "-o"]).arg(&library).arg(src.join("kernel.hip")),
        );
        let program = dir.join("gocrash");
        go_build(&src, &program, &[("CGO_LDFLAGS", format!("-L{0} -lgokernel -Wl,-rpath,{0}", dir.display()))]);
        program
    })
}

#[test]
fn a_cgo_program_that_crashes_in_c_keeps_gos_report_and_status_and_the_trace_names_its_kernels() {
    let program = go_crash_program();
    for (mode, report) in
        [("c-segv", "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0"), ("c-abort", "SIGABRT: abort")]
    {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("traces");
        let (plain, traced, summary) = crash_plain_and_traced(&dir, program, &[mode], &[]);
        // Go's own crash report, goroutine dump included, with and without the observer; Go exits with 2.
        assert_eq!(plain.status.code(), Some(2), "{}", String::from_utf8_lossy(&plain.stderr));
        for stderr in [&plain.stderr, &traced.stderr] {
            let stderr = String::from_utf8_lossy(stderr);
            assert!(stderr.contains(report) && stderr.contains("goroutine 1 [syscall]"), "{stderr}");
        }
        // The program's own account: four launch lines, all failed (no GPU).
        let launches =
            String::from_utf8_lossy(&plain.stdout).lines().filter(|l| l.starts_with("launch add_one ")).count() as u64;
        assert_eq!(launches, 4);
        // `add_one(float*, int)` in the Itanium C++ ABI's mangling.
        let kernel = &summary["kernels"][0];
        assert_eq!((kernel["name"].as_str(), kernel["launches"].as_u64()), (Some("_Z7add_onePfi"), Some(4)));
        let crash = &summary["crashes"][0];
        assert_eq!(crash["fatal"], true, "{crash}");
        let remembered: u64 = crash["threads"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["kernels"].as_array().unwrap())
            .map(|k| k["launches"].as_u64().unwrap())
            .sum();
        assert_eq!(remembered, 4);
        let crash_claim = claim(&summary, "trace.crash").unwrap_or_else(|| panic!("no crash claim: {summary}"));
        assert_eq!(crash_claim["confidence"], "Confirmed");
        assert!(crash_claim["statement"].as_str().unwrap().contains("4× add_one (other, failed)"), "{crash_claim}");
    }
}

#[test]
fn a_go_panic_the_program_recovers_from_is_not_reported_as_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("traces");
    let (plain, _, summary) = crash_plain_and_traced(&dir, go_crash_program(), &["go-recover"], &[]);
    assert!(plain.status.success());
    assert!(String::from_utf8_lossy(&plain.stdout).contains("recovered: true"));
    // The nil dereference reached the observer's handler, which passed it to Go's; the program went on.
    let crash = &summary["crashes"][0];
    assert_eq!((crash["signal"].as_str(), crash["fatal"].as_bool()), (Some("SIGSEGV"), Some(false)), "{crash}");
    let crash_claim = claim(&summary, "trace.crash").unwrap();
    assert_eq!(crash_claim["confidence"], "Inferred");
    assert!(crash_claim["statement"].as_str().unwrap().contains("it may have gone on"), "{crash_claim}");
}

#[test]
fn vendor_blas_launches_through_driver_pointers_are_summarised_with_their_libraries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("traces");
    let out = trace_host(&dir, &["blas", "3"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = summary_of(&out);
    // The test-double runtime's own count per kernel (it prints `fake NAME executed N …`).
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut expected = BTreeMap::new();
    for line in stdout.lines().filter_map(|l| l.strip_prefix("fake ")) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let executed: u64 = fields[2].parse().unwrap();
        if executed > 0 {
            expected.insert(fields[0].to_string(), executed);
        }
    }
    assert_eq!(launches_by_name(&summary), expected);
    let library = |prefix: &str| {
        let k = summary["kernels"].as_array().unwrap().iter().find(|k| k["name"].as_str().unwrap().starts_with(prefix));
        k.map(|k| (k["family"].as_str().unwrap().to_string(), k["library"].as_str().unwrap_or("").to_string()))
    };
    assert_eq!(library("sm90_xmma"), Some(("vendor-BLAS".into(), "cuBLASLt".into())));
    assert_eq!(library("cutlass_80"), Some(("vendor-BLAS".into(), "CUTLASS".into())));
    assert_eq!(library("Cijk_Ailk"), Some(("vendor-BLAS".into(), "rocBLAS/Tensile".into())));
    let claim = claim(&summary, "trace.family.vendor-BLAS").expect("a vendor-BLAS claim");
    assert_eq!(claim["confidence"], "Confirmed");
    let statement = claim["statement"].as_str().unwrap();
    assert!(
        statement.starts_with("vendor-BLAS (CUTLASS, cuBLASLt, rocBLAS/Tensile) ran: 14 launches of 5 kernel(s)"),
        "{statement}"
    );
}

#[test]
fn trace_env_proposes_a_private_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let observer = tmp.path().join("libbackscope_observer.so");
    std::fs::write(&observer, "").unwrap();
    let out = run(backscope().args(["trace", "--env", "--observer"]).arg(&observer));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::path::PathBuf::from(format!("/var/tmp/backscope-traces-{uid}"));
    let line = format!("BACKSCOPE_TRACE_DIR={}", dir.display());
    if out.status.success() {
        assert!(stdout.contains(&line), "{stdout}");
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0, "{:o}", meta.mode());
    } else {
        // The machine's directory is someone else's or open to others: refused, with the way around.
        assert!(stderr.contains(&dir.display().to_string()) && stderr.contains("--dir"), "{stderr}");
    }
    // The old fixed name is never proposed again.
    assert!(!stdout.contains("/var/tmp/backscope-traces\n") && !stdout.contains("/var/tmp/backscope-traces "));
}

/// A run `trace` refuses (a profile it cannot find) or cannot start (no such program) leaves no trace directory in the
/// temporary directory: the profile is checked before the directory is made, and a directory made for a program that
/// never started is removed, with a note saying so. The same program run for real keeps its directory.
#[test]
fn a_refused_or_unstarted_trace_leaves_no_directory() {
    let scratch = tempfile::tempdir().unwrap();
    let trace_dirs = || -> Vec<String> {
        std::fs::read_dir(scratch.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("backscope-trace-"))
            .collect()
    };
    let trace = |args: &[&str]| {
        let mut cmd = backscope();
        cmd.env("TMPDIR", scratch.path()).args(["trace", "--observer"]).arg(observer_library());
        cmd.arg("--vklayer").arg(vklayer_library()).args(args);
        run(&mut cmd)
    };
    let refused = trace(&["--impersonate", "no-such-gpu", "--", "true"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("no-such-gpu"), "{stderr}");
    assert!(!stderr.contains("tracing into"), "a directory was announced: {stderr}");
    assert_eq!(trace_dirs(), Vec::<String>::new());

    let missing = scratch.path().join("no-such-program");
    let unstarted = trace(&["--", missing.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&unstarted.stderr);
    assert!(!unstarted.status.success() && stderr.contains("cannot run"), "{stderr}");
    assert!(stderr.contains("removed") && stderr.contains("the command did not run"), "{stderr}");
    assert_eq!(trace_dirs(), Vec::<String>::new());

    let ran = trace(&["--", "true"]);
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    assert_eq!(trace_dirs().len(), 1, "a run that started keeps its directory");
}
