//! The Vulkan layer's crash and device-lost locus (`crates/vklayer/src/crash.rs`, `locus.rs`, `writer.rs`) under a
//! real Vulkan program on Mesa's lavapipe: `crates/vklayer/tests/c/vkcrash.c` names two compute pipelines, submits
//! `alpha_pipeline` (4,1,1) then `beta_pipeline` (2,1,1) three times (waiting for the fence each time) and then dies
//! in host code; `lost_layer.c`, a layer enabled below ours, makes a `vkWaitForFences` return
//! `VK_ERROR_DEVICE_LOST`. The expected dispatches are what the program's source submits, the same program's
//! normal exit (whose counts come through the exit flush, not the crash path) and, for the lost device, what the
//! program itself prints; the program's own output and exit status are compared with a run without the layer.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use backscope::trace::TraceFile;
use serde_json::Value;

use crate::support::layer_programs::{self, the_trace, LayerPrograms, LOST_LAYER};
use crate::support::util::*;

fn programs() -> &'static LayerPrograms {
    static P: std::sync::OnceLock<LayerPrograms> = std::sync::OnceLock::new();
    P.get_or_init(|| layer_programs::build("vulkan-crash", "vkcrash", "noop"))
}

fn vkcrash(mode: &str) -> Command {
    let p = programs();
    let mut cmd = Command::new(&p.program);
    cmd.arg(&p.spirv).arg(mode).env_remove("VK_INSTANCE_LAYERS").env_remove("VK_ADD_LAYER_PATH");
    cmd
}

/// The program with our layer enabled by hand, tracing into `dir`; with `lose`, the test layer below ours.
fn with_layer(mut cmd: Command, dir: &Path, lose: bool) -> Output {
    let p = programs();
    std::fs::create_dir_all(dir).unwrap();
    let (path, layers) = if lose {
        // Loader 1.3.239 orders explicit layers by where their manifests were found (VK_ADD_LAYER_PATH's order,
        // the first above the next); later loaders by VK_INSTANCE_LAYERS, whose first is closest to the
        // application. Both put ours above the test layer here.
        (format!("{}:{}", p.ours.display(), p.lost.display()), format!("VK_LAYER_BACKSCOPE_dispatch:{LOST_LAYER}"))
    } else {
        (p.ours.display().to_string(), "VK_LAYER_BACKSCOPE_dispatch".to_string())
    };
    cmd.env("VK_ADD_LAYER_PATH", path).env("VK_INSTANCE_LAYERS", layers).env("BACKSCOPE_TRACE_DIR", dir);
    run(&mut cmd)
}

/// Dispatches per pipeline name in the trace's windows.
fn counts(trace: &TraceFile) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = trace
        .kernels
        .values()
        .map(|k| {
            (k.name.clone(), trace.windows.iter().flat_map(|w| &w.counts).filter(|c| c.0 == k.id).map(|c| c.1).sum())
        })
        .collect();
    out.sort();
    out
}

/// `pipeline name, submission, workgroup counts × dispatches, label` of each remembered dispatch of queue 0.
fn remembered(trace: &TraceFile, queues: &[backscope::trace::QueueAtLoss]) -> Vec<String> {
    assert_eq!(queues.len(), 1, "one queue: {queues:?}");
    queues[0]
        .dispatches
        .iter()
        .map(|d| {
            let name = &trace.kernels[&d.kernel].name;
            format!("{name}, {}, {:?}×{}, {}", d.submit, d.grid, d.count, d.label.as_deref().unwrap_or("-"))
        })
        .collect()
}

/// What vkcrash.c submits: alpha_pipeline (4,1,1) labelled `ALPHA node.0`, then beta_pipeline (2,1,1) labelled
/// `BETA node.1`, in each of `submissions` submissions.
fn submitted(submissions: u64) -> Vec<String> {
    (1..=submissions)
        .flat_map(|s| {
            [
                format!("alpha_pipeline, {s}, [4, 1, 1]×1, ALPHA node.0"),
                format!("beta_pipeline, {s}, [2, 1, 1]×1, BETA node.1"),
            ]
        })
        .collect()
}

fn traced(mode: &str, dir: &Path, env: &[(&str, &str)]) -> (Output, Value) {
    let p = programs();
    let mut cmd = backscope();
    cmd.args(["trace", "--json", "--observer"]).arg(observer_library()).arg("--vklayer").arg(vklayer_library());
    cmd.arg("--dir").arg(dir).arg("--").arg(&p.program).arg(&p.spirv).arg(mode);
    cmd.env_remove("VK_INSTANCE_LAYERS").env_remove("VK_ADD_LAYER_PATH").envs(env.iter().copied());
    let out = run(&mut cmd);
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = serde_json::from_str(text.trim_end().rsplit('\n').next().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out, summary)
}

#[test]
fn a_vulkan_program_that_crashes_in_host_code_leaves_its_last_dispatches_and_dies_as_it_would() {
    // The control: the same work, a normal exit, counted by the exit flush.
    let tmp = tempfile::tempdir().unwrap();
    let control_dir = tmp.path().join("exit");
    let control = with_layer(vkcrash("exit"), &control_dir, false);
    assert!(control.status.success(), "{}", String::from_utf8_lossy(&control.stderr));
    let control = the_trace(&control_dir);
    assert!(control.crashes.is_empty() && control.end.is_some());
    assert_eq!(counts(&control), [("alpha_pipeline".to_string(), 3), ("beta_pipeline".to_string(), 3)]);

    for (mode, signal) in [("segv", libc::SIGSEGV), ("abort", libc::SIGABRT)] {
        let plain = run(&mut vkcrash(mode));
        assert_eq!(plain.status.signal(), Some(signal), "{mode}: {plain:?}");
        let dir = tmp.path().join(mode);
        let layered = with_layer(vkcrash(mode), &dir, false);
        // The program's own output and its death are what they are without the layer.
        assert_eq!(layered.status.signal(), Some(signal), "{mode}: {}", String::from_utf8_lossy(&layered.stderr));
        assert_eq!(layered.status.core_dumped(), plain.status.core_dumped(), "{mode}");
        assert_eq!(layered.stdout, plain.stdout, "{mode}");
        assert_eq!(String::from_utf8_lossy(&layered.stderr), String::from_utf8_lossy(&plain.stderr), "{mode}");
        assert!(String::from_utf8_lossy(&plain.stdout).contains("3 submissions done"), "{mode}");

        let trace = the_trace(&dir);
        // The trace is not empty: the window holds every dispatch, as the normal exit's does.
        assert_eq!(counts(&trace), counts(&control), "{mode}");
        assert_eq!(trace.crashes.len(), 1, "{mode}");
        let crash = &trace.crashes[0];
        assert_eq!((crash.signal, crash.flushed), (signal, true), "{mode}");
        assert_eq!(trace.fatal_crash().map(|c| c.seq), Some(1), "{mode}");
        assert_eq!(remembered(&trace, &crash.queues), submitted(3), "{mode}");
        assert_eq!(crash.queues[0].submits, 3);
        assert_eq!(crash.threads[0].tid, trace.pid(), "the receiving thread (the main thread) first");
        assert_eq!(crash.threads[0].in_flight, None, "it crashed in host code, outside any Vulkan call");

        // `backscope trace` (the observer loaded too: its own crash record of the same signal is merged).
        let (out, summary) = traced(mode, &tmp.path().join(format!("{mode}-trace")), &[]);
        assert_eq!(out.status.code(), Some(128 + signal), "{mode}");
        let crashes = summary["crashes"].as_array().unwrap();
        assert_eq!(crashes.len(), 1, "one crash, one claim: {crashes:#?}");
        let dispatches = crashes[0]["vulkan"][0]["dispatches"].as_array().unwrap();
        assert_eq!(dispatches.len(), 6, "{dispatches:#?}");
        let c = claim(&summary, "trace.crash");
        assert_eq!(c["confidence"], "Confirmed");
        let statement = c["statement"].as_str().unwrap();
        assert!(
            statement.contains("the last Vulkan dispatches before the crash were: queue 0 (llvmpipe"),
            "{statement}"
        );
        assert!(statement.contains("submissions 1–3 of 3: 3× alpha_pipeline (other) [4,1,1], 3× beta_pipeline (other) [2,1,1]; the last: beta_pipeline (other), in `BETA node.1`"), "{statement}");
        assert!(!statement.contains("no CUDA/HIP kernel launch was observed"), "{statement}");
        assert_eq!(c["sources"].as_array().unwrap().len(), 2, "the observer's and the layer's trace files: {c:#}");
    }
}

#[test]
fn a_program_whose_own_handler_exits_keeps_its_report_and_status_and_the_record_is_written_first() {
    // As Go's runtime does: a SIGSEGV handler with SA_ONSTACK|SA_SIGINFO, installed before the Vulkan instance,
    // that reports and exits with 2.
    let plain = run(&mut vkcrash("handler"));
    assert_eq!(plain.status.code(), Some(2));
    let plain_err = String::from_utf8_lossy(&plain.stderr).into_owned();
    assert!(plain_err.contains("vkcrash: own handler caught the signal"), "{plain_err}");
    let tmp = tempfile::tempdir().unwrap();
    let layered = with_layer(vkcrash("handler"), tmp.path(), false);
    assert_eq!(layered.status.code(), Some(2));
    assert_eq!(layered.stdout, plain.stdout);
    assert_eq!(String::from_utf8_lossy(&layered.stderr), plain_err);
    let trace = the_trace(tmp.path());
    assert_eq!(trace.crashes.len(), 1);
    assert_eq!(trace.crashes[0].signal, libc::SIGSEGV);
    assert_eq!(remembered(&trace, &trace.crashes[0].queues), submitted(3));
}

#[test]
fn a_lost_device_names_the_call_and_the_last_submitted_dispatches() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = vkcrash("lost");
    cmd.env("LOST_AFTER", "2");
    let out = with_layer(cmd, tmp.path(), true);
    // The program's own account: which call failed, after how many submissions.
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(3), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("vkcrash: vkWaitForFences returned VK_ERROR_DEVICE_LOST after 2 submissions"), "{said}");
    let trace = the_trace(tmp.path());
    assert_eq!(trace.device_lost.len(), 1);
    let lost = &trace.device_lost[0];
    assert_eq!((lost.call.as_str(), lost.result, lost.tid), ("vkWaitForFences", -4, trace.pid()));
    assert_eq!(remembered(&trace, &lost.queues), submitted(2));
    assert!(trace.crashes.is_empty() && trace.end.is_some(), "the program went on to exit normally");

    // `backscope trace` puts our layer first and keeps the test layer the environment names.
    let lost_dir = programs().lost.display().to_string();
    let (out, summary) = traced(
        "lost",
        &tmp.path().join("trace"),
        &[("LOST_AFTER", "2"), ("VK_ADD_LAYER_PATH", &lost_dir), ("VK_INSTANCE_LAYERS", LOST_LAYER)],
    );
    assert_eq!(out.status.code(), Some(3));
    let c = claim(&summary, "trace.device_lost");
    assert_eq!(c["confidence"], "Confirmed");
    let statement = c["statement"].as_str().unwrap();
    assert!(statement.contains(": vkWaitForFences returned VK_ERROR_DEVICE_LOST in thread "), "{statement}");
    assert!(
        statement.contains("the last Vulkan dispatches before it were: queue 0 (llvmpipe (LLVM")
            && statement
                .contains("submissions 1–2 of 2: 2× alpha_pipeline (other) [4,1,1], 2× beta_pipeline (other) [2,1,1]"),
        "{statement}"
    );
}

/// The cgo program (`crates/vklayer/tests/go`): the Go runtime first, then vkcrash.c's Vulkan work and death in C,
/// as ggml-vulkan inside Ollama's runner. Built once for this test binary.
fn go_program() -> &'static Path {
    static PROGRAM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PROGRAM.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/vklayer/tests/go");
        let program = programs().program.with_file_name("govkcrash");
        go_build(&src, &program, &[]);
        program
    })
}

#[test]
fn a_cgo_program_that_dies_in_c_after_vulkan_work_keeps_gos_report_and_status() {
    let spirv = &programs().spirv;
    for (mode, report) in
        [("segv", "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0"), ("abort", "SIGABRT: abort")]
    {
        let go = || {
            let mut cmd = Command::new(go_program());
            cmd.arg(spirv).arg(mode).env_remove("VK_INSTANCE_LAYERS").env_remove("VK_ADD_LAYER_PATH");
            cmd
        };
        let plain = run(&mut go());
        let tmp = tempfile::tempdir().unwrap();
        let layered = with_layer(go(), tmp.path(), false);
        // Go's own report (its goroutine dump included) and its exit status 2, with and without the layer.
        for out in [&plain, &layered] {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{mode}: {stderr}");
            assert!(stderr.contains(report) && stderr.contains("goroutine 1 [syscall]"), "{mode}: {stderr}");
        }
        assert_eq!(layered.stdout, plain.stdout, "{mode}");
        let trace = the_trace(tmp.path());
        assert_eq!(trace.crashes.len(), 1, "{mode}");
        assert_eq!(remembered(&trace, &trace.crashes[0].queues), submitted(3), "{mode}");
        assert_eq!(counts(&trace), [("alpha_pipeline".to_string(), 3), ("beta_pipeline".to_string(), 3)], "{mode}");
    }
}

/// llama-bench on lavapipe (the llama.cpp 11434 Vulkan build, ggml's debug markers naming its pipelines) sent
/// SIGSEGV in the middle of its work, as a Vega GPU's crash kills Ollama's runner: it dies by the signal as it would
/// without the layer, and the crash record names the ggml pipelines it had just submitted, each one ggml-vulkan's
/// (data/vulkan_pipelines.toml gives every one an op) and each counted in the trace's windows.
#[test]
fn llama_bench_killed_mid_run_names_the_ggml_pipelines_it_last_submitted() {
    let _turn = crate::support::sweep::heavy();
    let (bin, model) = (crate::support::sweep::llama_bin(), crate::support::sweep::tiny_model());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("traces");
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(bin.join("llama-bench"));
    // Enough repetitions to be still running when the signal comes.
    cmd.arg("-m").arg(&model).args(["-ngl", "99", "-p", "64", "-n", "16", "-r", "1000"]);
    cmd.env("GGML_VK_VISIBLE_DEVICES", "0").env("GGML_VK_DEBUG_MARKERS", "1");
    cmd.env("VK_ADD_LAYER_PATH", &programs().ours).env("VK_INSTANCE_LAYERS", "VK_LAYER_BACKSCOPE_dispatch");
    cmd.env("BACKSCOPE_TRACE_DIR", &dir).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    // Wait for the first window with dispatches (the writer's 50 ms windows), then a little more work.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let counted = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.lines().any(|l| l.starts_with("{\"window\""))))
    };
    while !counted() {
        assert!(std::time::Instant::now() < deadline, "no window with dispatches in 120 s");
        assert!(child.try_wait().unwrap().is_none(), "llama-bench ended before it was killed");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: sends a signal to the child this test started, still running (checked above).
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGSEGV) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "it dies by the signal, as without the layer");

    let trace = the_trace(&dir);
    let crash = trace.fatal_crash().expect("a crash record that ended the process");
    assert_eq!((crash.signal, crash.sender_pid), (libc::SIGSEGV, Some(std::process::id())));
    assert!(crash.flushed, "the open window was written first");
    let counted: std::collections::BTreeSet<u32> =
        trace.windows.iter().flat_map(|w| &w.counts).map(|&(id, _)| id).collect();
    let queue = crash.queues.iter().find(|q| !q.dispatches.is_empty()).expect("a queue with dispatches");
    assert!(queue.submits > 0 && queue.omitted == 0, "{queue:?}");
    for d in &queue.dispatches {
        let name = &trace.kernels[&d.kernel].name;
        assert!(counted.contains(&d.kernel), "{name} is remembered but not counted");
        let op = backscope::observe::vulkan::describe(name, None).op;
        assert!(op.is_some(), "{name}: not a ggml-vulkan pipeline with an op");
    }
    let read = stdout_ok(backscope().args(["trace", "--json", "--read"]).arg(&dir));
    let summary: Value = serde_json::from_str(read.trim_end()).unwrap();
    let statement = claim(&summary, "trace.crash")["statement"].as_str().unwrap().to_string();
    assert!(statement.contains(" received SIGSEGV sent by pid "), "{statement}");
    assert!(statement.contains("the last Vulkan dispatches before the crash were: queue "), "{statement}");
    let last = queue.dispatches.last().unwrap();
    let name = &trace.kernels[&last.kernel].name;
    // ggml-vulkan's labels (ggml_vk_ctx_begin, ggml_vk_debug_label): the command buffer's (`submit N`), inside it the
    // graph node's (its op names, a space, the tensor's name), inside that the dispatch's own (the pipeline's name
    // and its workgroup counts), which the layer follows but does not keep: the entry names both already.
    let label = last.label.as_deref().expect("the last dispatch's labels");
    let (submit, node) = label.split_once(" > ").unwrap_or_else(|| panic!("{label}"));
    assert!(submit.strip_prefix("submit ").is_some_and(|n| n.parse::<u32>().is_ok()), "{label}");
    let node_op = node.split([' ', '+']).next().unwrap();
    assert!(!node_op.is_empty() && node_op.chars().all(|c| c.is_ascii_uppercase() || c == '_'), "{label}");
    assert!(!label.contains(&format!("{name} (")), "the dispatch's own label is not kept: {label}");
    assert!(
        statement.contains(&format!("; the last: {name} (")) && statement.contains(&format!(", in `{label}`")),
        "{statement}"
    );
}

// ---- Rotating traces (BACKSCOPE_TRACE_ROTATE): a program left traced long after its budget ----

/// The rotation these tests ask for: a 64 KiB budget in 3 segments, 5 ms windows.
const ROTATING: [(&str, &str); 3] =
    [("BACKSCOPE_TRACE_MAX_BYTES", "64K"), ("BACKSCOPE_TRACE_ROTATE", "3"), ("BACKSCOPE_TRACE_INTERVAL_MS", "5")];

/// vkcrash in `mode` for `rounds` submissions 1 ms apart (each fence waited for at most 3 s), with `env`.
fn vkcrash_long(mode: &str, rounds: u32, env: &[(&str, &str)]) -> Command {
    let mut cmd = vkcrash(mode);
    cmd.arg(rounds.to_string()).arg("1000").arg("3000").envs(env.iter().copied());
    cmd
}

/// The files in `dir`, by name, with their text; each must read alone as a trace.
fn segment_files(dir: &Path) -> Vec<(String, String, TraceFile)> {
    let mut files: Vec<(String, String, TraceFile)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let trace = TraceFile::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.file_name().unwrap().to_string_lossy().into_owned(), text, trace)
        })
        .collect();
    files.sort_by_key(|(_, _, t)| t.header.segment);
    files
}

/// What every rotating run leaves: at most 3 segment files, within the budget together, the oldest rotated away,
/// each reading alone with the device and both pipelines defined, each but the newest ending with its `rotated`
/// record naming the next. Returns the newest segment.
fn assert_rotated(dir: &Path) -> TraceFile {
    let files = segment_files(dir);
    let names: Vec<&str> = files.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(files.len(), 3, "{names:?}");
    let total: usize = files.iter().map(|(_, text, _)| text.len()).sum();
    assert!(total <= 64 * 1024, "{total} bytes in {names:?}");
    let first = files[0].2.header.segment.unwrap();
    assert!(first >= 1, "the run outlived its first segment: {names:?}");
    for (i, (name, _, trace)) in files.iter().enumerate() {
        let k = first + i as u32;
        assert_eq!(trace.header.segment, Some(k), "{name}: consecutive segments");
        assert_eq!(name, &format!("trace-{}.s{k}.jsonl", trace.pid()), "the documented name");
        assert_eq!((trace.header.version, trace.header.segments_kept), (4, Some(3)));
        assert_eq!(
            trace.header.previous,
            Some(if k == 1 {
                format!("trace-{}.jsonl", trace.pid())
            } else {
                format!("trace-{}.s{}.jsonl", trace.pid(), k - 1)
            })
        );
        assert_eq!(trace.devices.len(), 1, "{name}: its own device record");
        let mut defined: Vec<&str> = trace.kernels.values().map(|k| k.name.as_str()).collect();
        defined.sort_unstable();
        assert_eq!(defined, ["alpha_pipeline", "beta_pipeline"], "{name}");
        // The newest may hold only what its process wrote last (under load, a failure record right after the
        // switch, with no dispatch in the window before it); every other segment filled up with windows.
        assert!(!trace.windows.is_empty() || i + 1 == files.len(), "{name}");
        match files.get(i + 1) {
            Some((next, _, _)) => assert_eq!(trace.rotated.as_ref().map(|r| &r.next), Some(next), "{name}"),
            None => assert!(trace.rotated.is_none(), "{name}: the newest"),
        }
        assert!(!trace.is_cut() && !trace.partial_last_line, "{name}");
    }
    files.into_iter().last().unwrap().2
}

/// `backscope trace --read DIR --json`.
fn read_summary(dir: &Path) -> Value {
    let out = run(backscope().args(["trace", "--json", "--read"]).arg(dir));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim_end().rsplit('\n').next().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&out.stderr)))
}

/// One process in the summary, its segments said, its counts lower bounds for the process.
fn assert_one_rotated_process(summary: &Value, rounds: u64) {
    let processes = summary["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1, "the segments are one process: {processes:#?}");
    let segments = &processes[0]["segments"];
    let present: Vec<u64> = segments["present"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(present.len(), 3, "{segments}");
    assert_eq!(segments["rotated_away"].as_u64(), Some(present[0]), "{segments}");
    assert!(processes[0]["file"].as_str().unwrap().ends_with(&format!(".s{}.jsonl", present[2])));
    let launches = processes[0]["launches"].as_u64().unwrap();
    assert!(launches > 0 && launches < 2 * rounds, "since the first segment read: {launches}");
    assert_eq!(summary["counts_are_lower_bounds"], true);
    let rotated = claim(summary, "trace.rotated");
    assert_eq!(rotated["confidence"], "Limited");
    let statement = rotated["statement"].as_str().unwrap();
    assert!(
        statement.contains(&format!("segments {}–{} of a trace that keeps 3", present[0], present[2]))
            && statement.contains("rotated away")
            && statement.contains("its counts are those since "),
        "{statement}"
    );
    assert!(claim(summary, "trace.total")["statement"].as_str().unwrap().starts_with("at least "));
}

/// The crash statement with the pid (and the main thread's id, the same number) as `P`: all that differs between
/// two runs of one program.
fn crash_statement(summary: &Value) -> String {
    let pid = summary["processes"][0]["pid"].as_u64().unwrap().to_string();
    claim(summary, "trace.crash")["statement"].as_str().unwrap().replace(&pid, "P")
}

#[test]
fn a_rotating_trace_keeps_three_segments_within_its_budget_and_the_crash_in_the_newest() {
    const ROUNDS: u32 = 3000;
    let tmp = tempfile::tempdir().unwrap();
    // The control: the same program, its trace not rotating (one file, within the default budget).
    let control_dir = tmp.path().join("one-file");
    let control =
        with_layer(vkcrash_long("segv", ROUNDS, &[("BACKSCOPE_TRACE_INTERVAL_MS", "5")]), &control_dir, false);
    assert_eq!(control.status.signal(), Some(libc::SIGSEGV));
    let one = the_trace(&control_dir);
    assert_eq!((one.header.version, one.header.segment), (3, None), "no rotation asked: the version 3 file");
    let dir = tmp.path().join("rotating");
    let out = with_layer(vkcrash_long("segv", ROUNDS, &ROTATING), &dir, false);
    // The program dies by its signal, its output as without the layer.
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, control.stdout);
    assert!(String::from_utf8_lossy(&out.stdout).contains("3000 submissions done, now segv"));
    let newest = assert_rotated(&dir);
    // The crash record is in the newest segment, naming the last submissions as the unrotated trace does.
    assert_eq!(newest.crashes.len(), 1);
    let crash = &newest.crashes[0];
    assert_eq!((crash.signal, crash.flushed), (libc::SIGSEGV, true));
    assert_eq!(newest.fatal_crash().map(|c| c.seq), Some(1));
    assert_eq!(crash.queues[0].submits, u64::from(ROUNDS));
    assert_eq!(remembered(&newest, &crash.queues), remembered(&one, &one.crashes[0].queues));

    let summary = read_summary(&dir);
    assert_one_rotated_process(&summary, ROUNDS.into());
    let c = claim(&summary, "trace.crash");
    assert_eq!(c["confidence"], "Confirmed");
    assert_eq!(crash_statement(&summary), crash_statement(&read_summary(&control_dir)), "named as without rotation");
    assert!(c["statement"].as_str().unwrap().contains("the last: beta_pipeline (other), in `BETA node.1`"), "{c}");
    assert!(c["sources"][0]["path"]
        .as_str()
        .unwrap()
        .ends_with(&format!(".s{}.jsonl", newest.header.segment.unwrap())));
}

#[test]
fn a_rotating_trace_records_a_lost_device_and_a_hang_late_in_the_run_in_its_newest_segment() {
    let tmp = tempfile::tempdir().unwrap();
    // The 2500th wait loses the device.
    let lost_dir = tmp.path().join("lost");
    let mut lost = vkcrash_long("lost", 5000, &ROTATING);
    lost.env("LOST_AFTER", "2500");
    let out = with_layer(lost, &lost_dir, true);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(3), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("vkWaitForFences returned VK_ERROR_DEVICE_LOST after 2500 submissions"), "{said}");
    let newest = assert_rotated(&lost_dir);
    assert_eq!(newest.device_lost.len(), 1);
    assert_eq!(newest.device_lost[0].queues[0].submits, 2500);
    assert!(newest.end.is_some(), "the program went on to exit normally");
    let summary = read_summary(&lost_dir);
    assert_one_rotated_process(&summary, 2500);
    let statement = claim(&summary, "trace.device_lost")["statement"].as_str().unwrap().to_string();
    assert!(
        statement.contains(": vkWaitForFences returned VK_ERROR_DEVICE_LOST in thread ")
            && statement.contains(
                "submissions 2485–2500 of 2500: 16× alpha_pipeline (other) [4,1,1], 16× beta_pipeline (other) [2,1,1]"
            ),
        "{statement}"
    );

    // Submission 2500 on are swallowed by the test layer, as a hung GPU never finishes them: the watcher's record,
    // 0.3 s into the stall, is in the newest segment; the program gives up after 3 s.
    let hang_dir = tmp.path().join("hang");
    let mut hung = vkcrash_long("exit", 5000, &ROTATING);
    hung.env("STALL_FROM", "2500").env("LOST_AFTER", "100000").env("BACKSCOPE_VK_HANG_MS", "300");
    let out = with_layer(hung, &hang_dir, true);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(4), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("vkcrash: submission 2500 did not finish in 3000 ms"), "{said}");
    let newest = assert_rotated(&hang_dir);
    assert_eq!(newest.hangs.len(), 1, "{:?}", newest.hangs);
    let summary = read_summary(&hang_dir);
    assert_one_rotated_process(&summary, 2500);
    let statement = claim(&summary, "trace.hang")["statement"].as_str().unwrap().to_string();
    assert!(statement.contains("GPU work made no progress for "), "{statement}");
    assert!(statement.contains("alpha_pipeline") && statement.contains("submission 2500"), "{statement}");
}

/// `BACKSCOPE_VK_PAUSED=1` (a cost measurement's forwarding-only arm, bench/gpu/blackbox_cost.sh `paused`): the layer
/// is loaded and its hooks forward every call, but it follows and counts nothing; `0` observes as unset does.
#[test]
fn a_layer_started_paused_forwards_everything_and_counts_no_dispatch() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = run(&mut vkcrash("exit"));
    assert!(plain.status.success(), "{plain:?}");
    for (value, observed) in [("1", false), ("0", true)] {
        let dir = tmp.path().join(format!("paused-{value}"));
        let mut cmd = vkcrash("exit");
        cmd.env("BACKSCOPE_VK_PAUSED", value);
        let out = with_layer(cmd, &dir, false);
        assert!(out.status.success(), "{value}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, plain.stdout, "{value}: the program's own output");
        let trace = the_trace(&dir);
        assert!(trace.end.is_some(), "{value}: the trace is written and ended");
        let expected: Vec<(String, u64)> = if observed {
            vec![("alpha_pipeline".to_string(), 3), ("beta_pipeline".to_string(), 3)]
        } else {
            counts(&trace).into_iter().map(|(name, _)| (name, 0)).collect()
        };
        assert_eq!(counts(&trace), expected, "BACKSCOPE_VK_PAUSED={value}");
    }
}
