//! The Vulkan layer's black box (`crates/vklayer/src/progress.rs`, `blackbox.rs`) under a real Vulkan program on
//! Mesa's lavapipe. `crates/vklayer/tests/c/vkspin.c` submits `before_a` and `before_b` in submission 1 (and waits for
//! it), then `spin_pipeline` in submission 2 and `after_c` in submission 3 (or both in submission 2, `grouped`).
//! lavapipe offers no buffer markers, so the layer follows progress by submission (its timeline semaphore, signalled
//! by each submission's last batch). A GPU that never finishes work is played by the test layer below ours
//! (`lost_layer.c` with `STALL_FROM=2`: submissions 2 on are swallowed, so their fences and semaphores never
//! signal); it can also return `VK_ERROR_DEVICE_LOST` (`LOST_AFTER`). The expected in-flight work, completed and
//! not-started counts come from the program's source: what it submitted, and which submission the test layer
//! swallowed first.

use std::path::Path;
use std::process::{Command, Output};

use backscope::trace::TraceFile;
use serde_json::Value;

use crate::support::layer_programs::{self, the_trace, LayerPrograms, LOST_LAYER};
use crate::support::util::*;

fn programs() -> &'static LayerPrograms {
    static P: std::sync::OnceLock<LayerPrograms> = std::sync::OnceLock::new();
    P.get_or_init(|| layer_programs::build("vulkan-blackbox", "vkspin", "spin"))
}

/// vkspin in `mode` (`[seconds] [grouped]` in `args`) under our layer tracing into `dir`, the test layer below it,
/// with `env`.
fn vkspin(mode: &str, args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Output {
    let p = programs();
    std::fs::create_dir_all(dir).unwrap();
    let mut cmd = Command::new(&p.program);
    cmd.arg(&p.spirv).arg(mode).args(args);
    cmd.env("VK_ADD_LAYER_PATH", format!("{}:{}", p.ours.display(), p.lost.display()))
        .env("VK_INSTANCE_LAYERS", format!("VK_LAYER_BACKSCOPE_dispatch:{LOST_LAYER}"))
        .env("BACKSCOPE_TRACE_DIR", dir)
        // The test layer loses the device at its 2nd wait unless told otherwise.
        .env("LOST_AFTER", "1000")
        .env_remove("STALL_FROM")
        .envs(env.iter().copied());
    run(&mut cmd)
}

/// `(by, completed, in flight as "name@submission#index", not started)` of a record's one queue.
fn progress(trace: &TraceFile, queues: &[backscope::trace::QueueAtLoss]) -> (String, u64, Vec<String>, u64) {
    assert_eq!(queues.len(), 1, "one queue: {queues:?}");
    let p = queues[0].progress.as_ref().unwrap_or_else(|| panic!("no progress: {queues:?}"));
    assert!(p.pending);
    let names =
        p.in_flight.iter().map(|d| format!("{}@{}#{}", trace.kernels[&d.kernel].name, d.submit, d.index)).collect();
    (p.by.clone(), p.completed, names, p.not_started)
}

/// vkspin's stall among a lavapipe trace's hang records, and its claim's id: the last record. On a loaded machine
/// lavapipe can take longer than the watcher's threshold to run submission 1 (a 2-core clean clone running the suite
/// beside llama.cpp builds, session 32), and the watcher then rightly writes a record while vkspin waits for it; such
/// an earlier record may hold nothing vkspin submitted after submission 1, and only one stall may follow it.
fn the_stall(trace: &TraceFile) -> (&backscope::trace::Hang, String) {
    let (last, earlier) = trace.hangs.split_last().unwrap_or_else(|| panic!("no hang record"));
    for h in earlier {
        assert!(names_only_submission_1(h), "a record before the stall names later work: {:?}", trace.hangs);
    }
    let id =
        if trace.hangs.len() == 1 { "trace.hang".to_string() } else { format!("trace.hang.{}", trace.hangs.len()) };
    (last, id)
}

/// Whether a hang record names nothing vkspin submitted after submission 1 (a record the stall may follow).
fn names_only_submission_1(hang: &backscope::trace::Hang) -> bool {
    hang.queues.iter().all(|q| q.dispatches.iter().all(|d| d.submit == 1))
}

/// `backscope trace --read DIR --json`'s claims.
fn claims(dir: &Path) -> Vec<Value> {
    let out = run(backscope().args(["trace", "--json", "--read"]).arg(dir));
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(text.trim_end().rsplit('\n').next().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&out.stderr)));
    summary["claims"].as_array().unwrap().clone()
}

fn claim(claims: &[Value], id: &str) -> Value {
    claims.iter().find(|c| c["id"] == id).cloned().unwrap_or_else(|| panic!("no claim {id}: {claims:#?}"))
}

#[test]
fn the_hang_watcher_names_the_unfinished_submission_while_the_program_still_waits() {
    let tmp = tempfile::tempdir().unwrap();
    // The program waits 4 s for submission 3; the watcher fires after 0.5 s without progress.
    let out = vkspin("hang", &["4"], tmp.path(), &[("STALL_FROM", "2"), ("BACKSCOPE_VK_HANG_MS", "500")]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("vkspin: the work did not finish in 4.0 s"), "{said}");
    let trace = the_trace(tmp.path());
    let (hang, id) = the_stall(&trace);
    assert!((500..4000).contains(&hang.stalled_ms), "{}", hang.stalled_ms);
    assert!(hang.at_ns > trace.header.start_ns);
    // Submission 1 (before_a, before_b) completed; submission 2 (spin_pipeline) is the first unfinished;
    // submission 3 (after_c) is after it.
    assert_eq!(progress(&trace, &hang.queues), ("submission".to_string(), 2, vec!["spin_pipeline@2#1".to_string()], 1));
    let c = claim(&claims(tmp.path()), &id);
    // By submission the layer knows the unfinished submission, not which of its dispatches stalled.
    assert_eq!(c["confidence"], "Inferred");
    let statement = c["statement"].as_str().unwrap();
    assert!(statement.contains("GPU work made no progress for "), "{statement}");
    assert!(
        statement.contains("unfinished: one or more of spin_pipeline [1,1,1] (dispatch 1 of submission 2)")
            && statement.contains("2 completed before it, 1 not started"),
        "{statement}"
    );
}

#[test]
fn a_grouped_submission_lists_every_dispatch_it_holds_as_a_candidate() {
    let tmp = tempfile::tempdir().unwrap();
    let out = vkspin("hang", &["2", "grouped"], tmp.path(), &[("STALL_FROM", "2"), ("BACKSCOPE_VK_HANG_MS", "300")]);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    let trace = the_trace(tmp.path());
    assert_eq!(
        progress(&trace, &the_stall(&trace).0.queues),
        ("submission".to_string(), 2, vec!["spin_pipeline@2#1".to_string(), "after_c@2#2".to_string()], 0)
    );
}

#[test]
fn a_crash_and_a_lost_device_during_the_stall_name_what_was_unfinished() {
    let tmp = tempfile::tempdir().unwrap();
    let crashed = tmp.path().join("segv");
    let out = vkspin("segv", &[], &crashed, &[("STALL_FROM", "2"), ("BACKSCOPE_VK_HANG_MS", "0")]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "it dies by the signal, as without the layer");
    let trace = the_trace(&crashed);
    assert!(trace.hangs.is_empty(), "BACKSCOPE_VK_HANG_MS=0 turns the watcher off");
    assert_eq!(trace.crashes.len(), 1);
    assert_eq!(
        progress(&trace, &trace.crashes[0].queues),
        ("submission".to_string(), 2, vec!["spin_pipeline@2#1".to_string()], 1)
    );
    let statement = claim(&claims(&crashed), "trace.crash")["statement"].as_str().unwrap().to_string();
    assert!(
        statement.contains("on the GPU at the crash: queue 0: unfinished: one or more of spin_pipeline"),
        "{statement}"
    );

    let lost = tmp.path().join("lost");
    let out = vkspin("lost", &[], &lost, &[("STALL_FROM", "2"), ("LOST_AFTER", "2")]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("vkspin: vkWaitForFences returned VK_ERROR_DEVICE_LOST"), "{said}");
    let trace = the_trace(&lost);
    assert_eq!(trace.device_lost.len(), 1);
    assert_eq!(
        progress(&trace, &trace.device_lost[0].queues),
        ("submission".to_string(), 2, vec!["spin_pipeline@2#1".to_string()], 1)
    );
    let statement = claim(&claims(&lost), "trace.device_lost")["statement"].as_str().unwrap().to_string();
    assert!(
        statement.contains("on the GPU at the device loss: queue 0: unfinished: one or more of spin_pipeline"),
        "{statement}"
    );
    assert!(trace.device_lost[0].faults.is_empty(), "lavapipe offers no VK_EXT_device_fault");
    assert!(!statement.contains("VK_EXT_device_fault"), "{statement}");
}

/// A driver that offers `VK_EXT_device_fault` (the test layer below ours stands in for RADV or NVIDIA's driver,
/// which offer it; lavapipe does not): after the device loss the layer asks it, and the record and the claim carry
/// its own account of the fault, beside the black box's progress.
#[test]
fn a_driver_with_device_fault_reports_its_own_account_of_the_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let description = "GPU page fault: VM_L2_PROTECTION_FAULT (test layer)";
    let out = vkspin(
        "lost",
        &[],
        tmp.path(),
        &[
            ("STALL_FROM", "2"),
            ("LOST_AFTER", "2"),
            ("FAULT_DESCRIPTION", description),
            ("FAULT_ADDRESS", "0x7f3a0000"),
        ],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{said}{}", String::from_utf8_lossy(&out.stderr));
    let trace = the_trace(tmp.path());
    assert_eq!(trace.device_lost.len(), 1);
    let faults = &trace.device_lost[0].faults;
    assert_eq!(faults.len(), 1, "{faults:?}");
    let device = trace.devices.keys().next().copied();
    assert!(device.is_some(), "the device record");
    assert_eq!(faults[0].device, device);
    assert_eq!(faults[0].description, description);
    assert_eq!(faults[0].addresses, [("write_invalid".to_string(), 0x7f3a_0000, 4096)]);
    assert_eq!(faults[0].vendor, [("test vendor fault".to_string(), 0x31, 0x1)]);
    // The black box's account is unchanged by the driver's.
    assert_eq!(
        progress(&trace, &trace.device_lost[0].queues),
        ("submission".to_string(), 2, vec!["spin_pipeline@2#1".to_string()], 1)
    );
    let statement = claim(&claims(tmp.path()), "trace.device_lost")["statement"].as_str().unwrap().to_string();
    let expected = format!(
        "reports (VK_EXT_device_fault): \"{description}\", write invalid at 0x7f3a0000 (within 4096 bytes), vendor: \
         \"test vendor fault\" (code 0x31, data 0x1)"
    );
    assert!(statement.contains(&expected), "{statement}");

    // With BACKSCOPE_VK_FAULT=0 the layer leaves the extension off: the same loss has no driver's account, and the
    // black box's is unchanged.
    let off = tmp.path().join("fault-off");
    let out = vkspin(
        "lost",
        &[],
        &off,
        &[
            ("STALL_FROM", "2"),
            ("LOST_AFTER", "2"),
            ("FAULT_DESCRIPTION", description),
            ("FAULT_ADDRESS", "0x7f3a0000"),
            ("BACKSCOPE_VK_FAULT", "0"),
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let trace = the_trace(&off);
    assert_eq!(trace.device_lost.len(), 1);
    assert!(trace.device_lost[0].faults.is_empty(), "{:?}", trace.device_lost[0].faults);
    assert_eq!(
        progress(&trace, &trace.device_lost[0].queues),
        ("submission".to_string(), 2, vec!["spin_pipeline@2#1".to_string()], 1)
    );
}

#[test]
fn work_that_finishes_leaves_no_hang_and_the_black_box_off_leaves_no_progress() {
    let tmp = tempfile::tempdir().unwrap();
    // The GPU finishes everything (nothing swallowed; the spin is released at once), with a 50 ms watcher.
    let normal = tmp.path().join("normal");
    let submits = tmp.path().join("submits.log");
    let log = submits.to_str().unwrap();
    let out = vkspin("exit", &[], &normal, &[("BACKSCOPE_VK_HANG_MS", "50"), ("SUBMITS_LOG", log)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // What reached the driver (the test layer below ours logs it): vkspin's three submissions of one batch with one
    // command buffer each and no semaphore (crates/vklayer/tests/c/vkspin.c), each batch now also signalling the
    // layer's timeline semaphore with the queue's submission number, in the application's batch and not in one added
    // after it.
    let logged = std::fs::read_to_string(&submits).unwrap();
    let expected: Vec<String> = (1..=3).map(|n| format!("batches 1 buffers 1 signals 1 timeline {n}")).collect();
    assert_eq!(logged.lines().collect::<Vec<_>>(), expected);
    let trace = the_trace(&normal);
    assert!(trace.hangs.is_empty() && trace.crashes.is_empty() && trace.end.is_some(), "{:?}", trace.hangs);
    let counts = |t: &TraceFile| {
        let mut v: Vec<(String, u64)> = t
            .kernels
            .values()
            .map(|k| {
                (k.name.clone(), t.windows.iter().flat_map(|w| &w.counts).filter(|c| c.0 == k.id).map(|c| c.1).sum())
            })
            .collect();
        v.sort();
        v
    };
    let expected: Vec<(String, u64)> = [("after_c", 1), ("before_a", 1), ("before_b", 1), ("spin_pipeline", 1)]
        .map(|(n, c)| (n.to_string(), c))
        .into();
    assert_eq!(counts(&trace), expected);

    // Off: the same stall leaves a crash record with the last submitted dispatches and no progress.
    let off = tmp.path().join("off");
    let submits_off = tmp.path().join("submits-off.log");
    let log = submits_off.to_str().unwrap();
    let out = vkspin("segv", &[], &off, &[("STALL_FROM", "2"), ("BACKSCOPE_VK_BLACKBOX", "0"), ("SUBMITS_LOG", log)]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    // Off, vkspin's batches reach the driver as vkspin made them.
    let logged = std::fs::read_to_string(&submits_off).unwrap();
    assert_eq!(logged.lines().collect::<Vec<_>>(), ["batches 1 buffers 1 signals 0 timeline -"; 3]);
    let trace = the_trace(&off);
    assert_eq!(trace.crashes.len(), 1);
    assert!(trace.crashes[0].queues.iter().all(|q| q.progress.is_none()), "{:?}", trace.crashes[0].queues);
    assert!(!trace.crashes[0].queues.is_empty() && !trace.crashes[0].queues[0].dispatches.is_empty());
}

/// A driver that offers `VK_AMD_buffer_marker`, as RADV, AMDVLK and NVIDIA's driver do: the test layer below ours
/// offers it on lavapipe and writes each marker with a fill (`BUFFER_MARKERS=1` in lost_layer.c), which lavapipe runs
/// in the command stream's order, each command to its end. Nothing is swallowed: spin_pipeline really spins
/// (bench/vklayer/spin.comp, far longer than the test waits on lavapipe) and the watcher and the crash handler read
/// the words lavapipe wrote. The expected values come from vkspin's source and each placement's rule
/// (docs/trace-format.md, "The black box"):
/// - one marker at each buffer's end (`BACKSCOPE_VK_MARKER_MIN_DISPATCHES=1`): the spinning submission's buffer is
///   the first unfinished one; after_c's is not started;
/// - the default, a buffer marked once 100 dispatches went unmarked: none of vkspin's 4 is, so submission 1 is known
///   finished from its fence, which vkspin waited for, and every later dispatch is a candidate;
/// - grouped, markers around every dispatch: spin_pipeline started and did not complete, after_c in the same buffer
///   did not start: the spinning dispatch alone (by submission, both would be candidates);
/// - at most one dispatch unmarked in a row (`BACKSCOPE_VK_MARKER_MIN_DISPATCHES=2`): submission 1 (2 dispatches)
///   is marked, submission 2 (1) is not, submission 3 (1 + 1) is: spin_pipeline and after_c are the candidates, up
///   to the marked one.
#[test]
fn a_driver_with_buffer_markers_names_the_spinning_dispatch_from_the_words_the_gpu_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |mode: &str, name: &str, args: &[&str], env: &[(&str, &str)]| {
        let dir = tmp.path().join(name);
        let env: Vec<(&str, &str)> =
            [("BUFFER_MARKERS", "1"), ("BACKSCOPE_VK_HANG_MS", "300")].into_iter().chain(env.iter().copied()).collect();
        (vkspin(mode, args, &dir, &env), the_trace(&dir), dir)
    };
    let hang = |name: &str, args: &[&str], env: &[(&str, &str)]| {
        let (out, trace, dir) = run("hang", name, args, env);
        assert_eq!(out.status.code(), Some(4), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let (stall, id) = the_stall(&trace);
        (progress(&trace, &stall.queues), dir, id)
    };
    let named = |by: &str, names: &[&str], not_started: u64| {
        (by.to_string(), 2, names.iter().map(|n| n.to_string()).collect::<Vec<_>>(), not_started)
    };

    let (p, dir, id) = hang("buffer", &["2"], &[("BACKSCOPE_VK_MARKER_MIN_DISPATCHES", "1")]);
    assert_eq!(p, named("command_buffer_marker", &["spin_pipeline@2#1"], 1));
    let statement = claim(&claims(&dir), &id)["statement"].as_str().unwrap().to_string();
    assert!(
        statement.contains("unfinished: one or more of spin_pipeline [1,1,1] (dispatch 1 of submission 2)")
            && statement.contains("by the GPU's markers at command buffers' ends"),
        "{statement}"
    );

    let (p, dir, id) = hang("default", &["2"], &[]);
    assert_eq!(p, named("command_buffer_marker", &["spin_pipeline@2#1", "after_c@3#1"], 0));
    // No marker covers them: the hang is the application's wait that made no progress, and the record says the
    // markers show them not finished rather than unfinished.
    let statement = claim(&claims(&dir), &id)["statement"].as_str().unwrap().to_string();
    assert!(
        statement.contains("not seen to finish: spin_pipeline [1,1,1] (dispatch 1 of submission 2)"),
        "{statement}"
    );

    // The GPU finished vkspin's work at once and the program then left it alone for 1.5 s without asking after it
    // (as ggml does while it compiles pipelines after a small submission): with the default, no marker covers its
    // buffers and no fence was looked at, which is no evidence of a hang; every buffer marked, the markers show the
    // work finished. Neither writes a hang record (the watcher looks every 75 ms at 300).
    for (name, env) in [("idle", vec![]), ("idle-marked", vec![("BACKSCOPE_VK_MARKER_MIN_DISPATCHES", "1")])] {
        let (out, trace, _) = run("idle", name, &["1.5"], &env);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(trace.hangs.is_empty(), "{name}: {:?}", trace.hangs);
        assert!(String::from_utf8_lossy(&out.stdout).contains("vkspin: done"), "{name}: {out:?}");
    }

    let (p, dir, id) = hang("dispatch", &["2", "grouped"], &[("BACKSCOPE_VK_MARKERS", "dispatch")]);
    assert_eq!(p, named("buffer_marker", &["spin_pipeline@2#1"], 1));
    let c = claim(&claims(&dir), &id);
    assert_eq!(c["confidence"], "Confirmed", "{c:#}");
    assert!(c["statement"].as_str().unwrap().contains("in flight: spin_pipeline"), "{c:#}");

    let (p, _, _) = hang("min2", &["2"], &[("BACKSCOPE_VK_MARKER_MIN_DISPATCHES", "2")]);
    assert_eq!(p, named("command_buffer_marker", &["spin_pipeline@2#1", "after_c@3#1"], 0));

    // A crash while the GPU spins reads the same words in the signal handler.
    let (out, trace, _) = run("segv", "segv", &[], &[("BACKSCOPE_VK_MARKERS", "dispatch")]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    assert_eq!(trace.crashes.len(), 1);
    assert_eq!(progress(&trace, &trace.crashes[0].queues), named("buffer_marker", &["spin_pipeline@2#1"], 1));
}

/// The kernel's side of a hang joined in `backscope trace`'s summary. A GPU driver's lines are played from a file in
/// /dev/kmsg's record format (`BACKSCOPE_KMSG`) rather than written into this host's real kernel log, where they
/// would tell whatever watches it of a GPU failure that did not happen. Once the layer's hang record is written, the
/// kernel 6.x amdgpu lines of ggml-org/llama.cpp#21724 (turn 8) are appended with vkspin's pid in place of theirs,
/// then pop-os/cosmic-comp#2626's timeout naming its own process: the first is joined to the traced process and its
/// hang, the second is kept and said apart.
#[test]
fn the_kernels_timeout_naming_the_traced_pid_joins_the_hang() {
    use std::io::Write;
    let p = programs();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, kmsg) = (tmp.path().join("trace"), tmp.path().join("kmsg"));
    std::fs::write(&kmsg, "").unwrap();
    let mut cmd = backscope();
    cmd.args(["trace", "--json", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(&dir).arg("--");
    cmd.arg(&p.program).arg(&p.spirv).args(["hang", "4"]);
    cmd.env("VK_ADD_LAYER_PATH", &p.lost)
        .env("VK_INSTANCE_LAYERS", LOST_LAYER)
        .env("STALL_FROM", "2")
        .env("LOST_AFTER", "1000")
        .env("BACKSCOPE_VK_HANG_MS", "500")
        .env("BACKSCOPE_KMSG", &kmsg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    // vkspin's trace file, once it holds the stall's hang record (one naming later work than submission 1's: an
    // earlier record may name only submission 1, see `the_stall`): its name gives the pid.
    let started = std::time::Instant::now();
    let pid: u32 = loop {
        let hung = std::fs::read_dir(&dir).into_iter().flatten().flatten().find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("trace-")?.strip_suffix(".jsonl")?.parse().ok()?;
            // A file being written may end in half a line: not parsed yet, read again.
            let trace = TraceFile::parse(&std::fs::read_to_string(e.path()).ok()?).ok()?;
            trace.hangs.iter().any(|h| !names_only_submission_1(h)).then_some(pid)
        });
        if let Some(pid) = hung {
            break pid;
        }
        assert!(started.elapsed().as_secs() < 20, "no hang record in {}", dir.display());
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // The printk clock, which journald takes as CLOCK_MONOTONIC (tests/trace/kernel_log.rs checks it on this machine).
    let usec = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000;
    let records = [
        (3, 5001, usec, "amdgpu 0000:c2:00.0: ring gfx_0.0.0 timeout, signaled seq=166926, emitted seq=166928".to_string()),
        (3, 5002, usec + 40, format!("amdgpu 0000:c2:00.0:  Process vkspin pid {pid} thread vkspin pid {pid}")),
        (6, 5003, usec + 90, "amdgpu 0000:c2:00.0: Starting gfx_0.0.0 ring reset".to_string()),
        (6, 5004, usec + 200, "amdgpu 0000:c2:00.0: Ring gfx_0.0.0 reset succeeded".to_string()),
        (3, 5005, usec + 300, "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=5000163, emitted seq=5000165".to_string()),
        (3, 5006, usec + 310, "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* Process information: process cosmic-comp pid 3503 thread cosmic-com:cs0 pid 3539".to_string()),
    ];
    let text: String = records.iter().map(|(l, seq, t, text)| format!("{l},{seq},{t},-;{text}\n")).collect();
    std::fs::OpenOptions::new().append(true).open(&kmsg).unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{said}{}", String::from_utf8_lossy(&out.stderr));
    let trace_file = dir.join(format!("trace-{pid}.jsonl"));
    let trace = TraceFile::parse(&std::fs::read_to_string(&trace_file).unwrap()).unwrap();
    let (_, hang_id) = the_stall(&trace);
    let summary: Value = serde_json::from_str(said.trim_end().rsplit('\n').next().unwrap()).unwrap();
    let claims = summary["claims"].as_array().unwrap().clone();
    let joined = claim(&claims, "trace.kernel.1");
    assert_eq!(joined["confidence"], "Confirmed");
    let statement = joined["statement"].as_str().unwrap();
    assert!(
        statement.starts_with(&format!(
            "The kernel's GPU driver reported a GPU job timeout on ring gfx_0.0.0 naming pid {pid} (vkspin), a traced process ("
        )) && statement.contains(&format!(" pid {pid}'s stalled GPU work ("))
            && statement.contains(&format!(" s without progress, the layer's hang watcher) ({hang_id}); "))
            && statement.ends_with("; the GPU was reset"),
        "{statement}"
    );
    // The kernel's lines are its sources, cited in the stored file.
    let kernel_log = dir.join("kernel-log.jsonl").display().to_string();
    let sources = joined["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 4, "{sources:#?}");
    assert_eq!((sources[1]["path"].as_str(), sources[1]["line"].as_u64()), (Some(kernel_log.as_str()), Some(3)));
    // The hang's own claim names the kernel's side.
    let hang = claim(&claims, &hang_id)["statement"].as_str().unwrap().to_string();
    assert!(
        hang.contains(
            "; the kernel's side (trace.kernel.1): a GPU job timeout on ring gfx_0.0.0 naming this process, "
        ),
        "{hang}"
    );
    let apart = claim(&claims, "trace.kernel.2")["statement"].as_str().unwrap().to_string();
    assert!(apart.contains("naming pid 3503 (cosmic-comp), which is not a traced process"), "{apart}");
    assert!(!apart.contains("trace.hang"), "{apart}");
    assert_eq!(summary["kernel_log"]["lines"].as_array().unwrap().len(), 6);
    // `--read` of the directory says the same.
    assert_eq!(claims, self::claims(&dir));
}

/// `BACKSCOPE_VK_MARKERS=none` on a driver that offers buffer markers (NVIDIA's on the H200, session 11's device call 6:
/// docs/validation/gpu-2026-12-03-harness-spread/call6.sh): vkspin's hang is followed by submissions, not by the GPU's
/// markers, and still names the spinning dispatch as the unfinished one, as the default's markers do.
#[test]
fn on_the_h200_markers_none_follows_submissions_and_names_the_same_unfinished_dispatch() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation/gpu-2026-12-03-harness-spread/call6");
    let read = |markers: &str| {
        let sub = dir.join(markers);
        let file = std::fs::read_dir(&sub).unwrap().next().unwrap().unwrap().path();
        TraceFile::parse(&std::fs::read_to_string(&file).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
    };
    let (default, none) = (read("buffer"), read("none"));
    let spin = |by: &str| (by.to_string(), 2, vec!["spin_pipeline@2#1".to_string()], 1);
    assert_eq!(progress(&default, &default.hangs[0].queues), spin("command_buffer_marker"));
    assert_eq!(progress(&none, &none.hangs[0].queues), spin("submission"));
}

/// The GPU machine's records (docs/validation/gpu-2026-12-02-blackbox, `bench/gpu/blackbox_h200.sh`): NVIDIA's driver
/// offers buffer markers, so the layer followed the H200's queue with the GPU's own completion markers. vkspin's
/// spinning dispatch is named, exactly (the grouped case tells it from `after_c` in the same command buffer), and each
/// of ten llama-bench runs killed mid-run names one dispatch in flight whose counts add up.
#[test]
fn on_the_h200_the_gpus_own_markers_named_the_spinning_dispatch_and_llama_bench_s_in_flight_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation/gpu-2026-12-02-blackbox/traces");
    let read = |name: &str| {
        let path = dir.join(format!("{name}.jsonl"));
        TraceFile::parse(&std::fs::read_to_string(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let spin = ("buffer_marker".to_string(), 2, vec!["spin_pipeline@2#1".to_string()], 1);
    for (name, queues) in [
        ("hang", read("hang").hangs[0].queues.clone()),
        ("hang-grouped", read("hang-grouped").hangs[0].queues.clone()),
        ("segv", read("segv").crashes[0].queues.clone()),
        ("lost", read("lost").device_lost[0].queues.clone()),
    ] {
        let trace = read(name);
        assert_eq!(progress(&trace, &queues), spin, "{name}");
    }
    let off = read("off");
    assert!(off.crashes[0].queues.iter().all(|q| q.progress.is_none()), "the black box off");

    let mut named = 0;
    for delay in ["2.0", "2.5", "3.0", "3.5", "4.0", "4.5", "5.0", "5.5", "6.0", "6.5"] {
        let trace = read(&format!("killed-{delay}"));
        assert_eq!(trace.crashes.len(), 1, "{delay}");
        let q = &trace.crashes[0].queues[0];
        let p = q.progress.as_ref().expect("progress");
        assert_eq!(p.by, "buffer_marker");
        assert!(p.pending, "{delay}: work was on the GPU");
        // Each dispatch in flight is of a pipeline the windows counted, in one of the queue's last submissions.
        for d in &p.in_flight {
            assert!(trace.kernels.contains_key(&d.kernel), "{delay}");
            assert!(
                d.submit + 32 > q.submits && d.submit <= q.submits,
                "{delay}: submission {} of {}",
                d.submit,
                q.submits
            );
            assert!(d.index >= 1);
        }
        named += usize::from(p.in_flight.len() == 1 && p.more_in_flight == 0);
    }
    assert_eq!(named, 10, "one dispatch in flight named in each killed run");
}

/// bench/gpu/vk_marker_cost.c, the GPU machine's measurement of what each way of learning GPU progress costs, runs
/// here with the modes lavapipe offers (the timeline semaphore ones; no buffer markers, no checkpoints) and leaves the
/// others out with a line each. Every round checks after its fence that its mode's progress arrived (the markers'
/// words, the semaphore's last value) and the program exits 1 when one did not, so a mode that writes nothing fails
/// here, not on a device call.
#[test]
fn the_marker_cost_bench_times_the_modes_the_driver_offers_and_leaves_out_the_others() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("marker-cost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let program = dir.join("vk_marker_cost");
    stdout_ok(
        Command::new("gcc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&program)
            .arg(root.join("bench/gpu/vk_marker_cost.c"))
            .args(["-lvulkan", "-lm"]),
    );
    let spirv = dir.join("noop.spv");
    stdout_ok(Command::new("glslc").arg(root.join("bench/vklayer/noop.comp")).arg("-o").arg(&spirv));
    let bench = |modes: Option<&str>, shape: &str| {
        let mut cmd = Command::new(&program);
        cmd.arg(&spirv).arg("4").arg(shape).env("MARKER_COST_WARMUP", "1").env_remove("MARKER_COST_MODES");
        if let Some(m) = modes {
            cmd.env("MARKER_COST_MODES", m);
        }
        run(&mut cmd)
    };
    let rows = |out: &Output| -> Vec<Value> {
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let all =
        ["none", "marker_host", "marker_dev", "marker2_cs", "marker_top", "checkpoint", "sem_batch", "sem_merged"];

    let out = bench(None, "3,5");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let got = rows(&out);
    for mode in all {
        let n = got.iter().filter(|r| r["mode"] == mode).count();
        let left_out = stderr.contains(&format!("{mode}: not offered by this driver, left out"));
        assert!((n == 4 && !left_out) || (n == 0 && left_out), "{mode}: {n} rows, left out {left_out}\n{stderr}");
        // Timed modes have a line in both summaries (the round's wall time and the host's part).
        assert_eq!(stderr.matches(&format!("  {mode} ")).count(), if n == 4 { 2 } else { 0 }, "{stderr}");
    }
    // lavapipe offers timeline semaphores (Vulkan 1.2) and not VK_AMD_buffer_marker (it follows progress by
    // submission under our layer, as the tests above show).
    for mode in ["none", "sem_batch", "sem_merged"] {
        assert_eq!(got.iter().filter(|r| r["mode"] == mode).count(), 4, "{mode}: {stderr}");
    }
    assert_eq!(got.iter().filter(|r| r["mode"] == "marker_host").count(), 0, "{stderr}");
    for r in &got {
        assert_eq!(r["buffers"], 2, "{r}");
        let (ns, host) = (r["ns"].as_u64().unwrap(), r["host_ns"].as_u64().unwrap());
        assert!(host > 0 && host <= ns, "the host's part within the round: {r}");
    }
    assert!(stderr.contains("4 rounds of 2 buffers, 8 dispatches (3,5)"), "{stderr}");

    // The modes asked for, and only those.
    let out = bench(Some("none sem_merged"), "1");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let modes: std::collections::BTreeSet<String> =
        rows(&out).iter().map(|r| r["mode"].as_str().unwrap().to_owned()).collect();
    assert_eq!(modes, ["none", "sem_merged"].map(String::from).into());
    // Without the baseline nothing is timed; a shape that is not a list of counts is refused, naming it.
    let out = bench(Some("sem_batch"), "1");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must include none"));
    let out = bench(None, "3,x");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SHAPE=3,x"));
    let _ = std::fs::remove_dir_all(&dir);
}
