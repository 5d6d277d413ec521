//! `backscope sweep --trace`: each request's time window joined to the dispatch observer's trace windows.
//!
//! 1. A real llama-server (llama.cpp 11434, CPU backend with `--device none`) started by the sweep with the real
//!    observer preloaded: proves the plumbing (the observer is mapped into the server, the trace directory is in its
//!    environment, every record carries a window and a trace section, the claim says no CUDA/HIP launch was seen).
//!    It cannot show GPU counts: this machine has no GPU, and a CPU llama-server never calls CUDA or HIP (so the
//!    observer writes no file). Counts on a real GPU were validated separately (docs/trace-validation.md).
//! 2. A protocol stand-in that does launch kernels through the real HIP runtime: a small Python HTTP server that
//!    answers `/health` and `/completion` in llama-server's JSON shape and, per request, runs a hipcc-built program
//!    (crates/observer/tests/c/kernels.hip; without a GPU its launches fail but are counted). It imitates nothing of
//!    llama.cpp's behaviour; it checks that each request's window gets exactly the launches made during it, in a
//!    child process of the server (as Ollama's runners are).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::sweep::*;
use crate::support::util::*;

/// CLOCK_MONOTONIC now, in nanoseconds: the clock of the observer's trace windows.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes into our timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn report(db: &Path, run_id: &str) -> (Vec<Value>, String) {
    let out = backscope().args(["sweep", "report", "--json", run_id, "--db"]).arg(db).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Wide enough that no table header or cell wraps: the tests read whole cells.
    let text = stdout_ok(backscope().env("COLUMNS", "400").args(["sweep", "report", run_id, "--db"]).arg(db));
    (v["claims"].as_array().unwrap().clone(), text)
}

/// `sweep --trace` of the real CPU llama-server (`--device none`, the observer preloaded) on the prompt "Hello":
/// `repetitions` cells of `num_predict` tokens each, into `db` and `runs`.
fn start_traced_cpu_sweep(
    bin: &Path,
    model: &Path,
    db: &Path,
    runs: &Path,
    repetitions: &str,
    num_predict: &str,
) -> Sweep {
    let observer = observer_library();
    let args = [
        "--server",
        "cpu=llama-server:--device,none",
        "--llama-bin",
        bin.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--num-gpu",
        "0",
        "--repetitions",
        repetitions,
        "--num-predict",
        num_predict,
        "--prompt",
        "Hello",
        "--read-timeout",
        "120",
        "--trace",
        "--observer",
        observer.to_str().unwrap(),
    ];
    Sweep::start(&args, db, runs)
}

#[test]
fn traced_llama_server_on_the_cpu_records_a_window_per_request_and_no_cuda_or_hip_launch() {
    let _turn = heavy();
    let (bin, model) = (llama_bin(), tiny_model());
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("backscope.db"), dir.path().join("runs"));
    let before = monotonic_ns();
    let mut sweep = start_traced_cpu_sweep(&bin, &model, &db, &runs, "3", "4");
    let started = sweep.wait_for(Duration::from_secs(30), |e| event_is(e, "run_started"));
    let run_dir = PathBuf::from(s(&started["run_dir"]));
    let ready = sweep.wait_for(Duration::from_secs(300), |e| event_is(e, "server_ready"));
    let pid = ready["pid"].as_u64().unwrap();
    // The real llama-server has the observer mapped and the trace directory of this start in its environment.
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.lines().any(|l| l.ends_with("libbackscope_observer.so")), "observer not mapped into {pid}");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ: Vec<String> = environ.split(|&b| b == 0).map(|v| String::from_utf8_lossy(v).into_owned()).collect();
    let trace_dir = run_dir.join("traces/s001-cpu");
    assert!(environ.contains(&format!("BACKSCOPE_TRACE_DIR={}", trace_dir.display())), "{environ:?}");
    assert!(environ.iter().any(|v| v.starts_with("LD_PRELOAD=") && v.contains("libbackscope_observer.so")));
    assert!(environ.contains(&"BACKSCOPE_TRACE_INTERVAL_MS=20".to_string()));
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(exe.ends_with("llama-server"), "{}", exe.display());

    let (status, events, stderr) = sweep.finish(Duration::from_secs(600));
    let after = monotonic_ns();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}\nevents: {events:#?}");
    assert!(trace_dir.is_dir());
    let recs = records(&events);
    assert_eq!(recs.len(), 3);
    let mut last_t1 = before;
    for r in &recs {
        assert_eq!(r["status"], "ok", "{r:#}");
        assert_eq!(r["server"]["pid"].as_u64(), Some(pid));
        let t = &r["trace"];
        assert_eq!(t["dir"], "traces/s001-cpu", "{t:#}");
        let (t0, t1) = (t["window_ns"][0].as_u64().unwrap(), t["window_ns"][1].as_u64().unwrap());
        // Windows on the observer's clock, in order, inside the sweep's (and so the server's) lifetime.
        assert!(last_t1 <= t0 && t0 < t1 && t1 <= after, "{t:#}");
        let wall_ns = r["wall_ms"].as_f64().unwrap() * 1e6;
        assert!(((t1 - t0) as f64 - wall_ns).abs() < 50e6, "window {} ns vs wall {wall_ns} ns", t1 - t0);
        last_t1 = t1;
        assert_eq!(t["observer_loaded"], true, "{t:#}");
        assert_eq!(t["total_launches"], 0, "a CPU llama-server launches no CUDA/HIP kernel: {t:#}");
        assert_eq!(t["interval_ms"], 20);
        // No process touched CUDA or HIP, so the observer created no file (docs/trace-format.md, Files).
        assert!(t["files"].as_array().unwrap().is_empty(), "{t:#}");
        let stored: Value = serde_json::from_slice(&std::fs::read(run_dir.join(s(&r["file"]))).unwrap()).unwrap();
        assert_eq!(&stored["trace"], t, "result.json holds the same trace section");
    }
    assert!(std::fs::read_dir(&trace_dir).unwrap().next().is_none());
    let run_id = s(&recs[0]["run_id"]).to_string();
    assert_eq!(export(&db, Some(&run_id)), recs, "the database holds the trace sections too");
    let (claims, text) = report(&db, &run_id);
    // One claim per group (the report's), over its three traced requests.
    let kernel_claims: Vec<&Value> = claims.iter().filter(|c| s(&c["id"]).ends_with(".kernels")).collect();
    assert_eq!(kernel_claims.len(), 1, "{claims:#?}");
    for c in kernel_claims {
        assert_eq!(c["confidence"], "Confirmed");
        assert!(s(&c["statement"]).contains("(median of 3 traced requests): no CUDA/HIP kernel launch"), "{c:#}");
        assert!(c["sources"].as_array().unwrap().iter().any(|src| src["kind"] == "run"), "{c:#}");
    }
    assert!(text.contains("kernels (per request)") && text.contains("none"), "{text}");
}

#[test]
fn each_request_gets_exactly_the_hip_launches_made_during_it() {
    let observer = observer_library();
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/observer/tests/c/kernels.hip");
    let exe = tmp.path().join("kernels");
    stdout_ok(hipcc().arg("--offload-arch=gfx900").arg(&src).arg("-o").arg(&exe));
    let plain = stdout_ok(&mut Command::new(&exe));
    let per_run = plain.lines().filter(|l| l.starts_with("launch ")).count() as u64;
    assert!(per_run > 0);
    let counts = tmp.path().join("counts.txt");
    let (status, events, stderr, db) = traced_stand_in_sweep(tmp.path(), &exe, &observer, 4);
    assert_eq!(status.code(), Some(0), "stderr: {stderr}\nevents: {events:#?}");
    let run_dir = PathBuf::from(s(&events.iter().find(|e| event_is(e, "run_started")).unwrap()["run_dir"]));
    let recs = records(&events);
    assert_eq!(recs.len(), 4);
    let done: Vec<u64> = std::fs::read_to_string(&counts).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(done, vec![per_run; 4], "the stand-in ran the program once per request");
    let server_pid = recs[0]["server"]["pid"].as_u64().unwrap();
    let mut pids = std::collections::BTreeSet::new();
    for r in &recs {
        let t = &r["trace"];
        assert_eq!(r["status"], "ok", "{r:#}");
        // Exactly this request's program run: not the previous one's, not the next one's.
        assert_eq!(t["total_launches"].as_u64(), Some(per_run), "{t:#}");
        assert_eq!(t["failed_launches"].as_u64(), Some(per_run), "no GPU: every launch returns an error");
        let active: Vec<&Value> =
            t["processes"].as_array().unwrap().iter().filter(|p| p["launches"].as_u64() > Some(0)).collect();
        assert_eq!(active.len(), 1, "{t:#}");
        let p = active[0];
        assert_eq!(p["ppid"].as_u64(), Some(server_pid), "the launching process is the server's child");
        assert_eq!(Path::new(s(&p["exe"])), exe.canonicalize().unwrap());
        assert!(pids.insert(p["pid"].as_u64().unwrap()), "one program run per request");
        // The cited trace file exists with a header naming that process.
        let file = run_dir.join(s(&p["file"]));
        let header: Value =
            serde_json::from_str(std::fs::read_to_string(&file).unwrap().lines().next().unwrap()).unwrap();
        assert_eq!(header["format"], "backscope-trace");
        assert_eq!(header["pid"], p["pid"]);
        assert_eq!(header["clock"], "monotonic");
        assert!(t["kernels"].as_array().unwrap().iter().all(|k| k["api"] == "hip"), "{t:#}");
    }
    // Every program run left its own file in this server start's trace directory; each record sees all of them.
    let files = std::fs::read_dir(run_dir.join("traces/s001-hip")).unwrap().count();
    assert_eq!(files, 4);
    let run_id = s(&recs[0]["run_id"]).to_string();
    let (claims, text) = report(&db, &run_id);
    // One claim for the group of four requests (the report's), each request having launched the same.
    let c: Vec<&Value> = claims.iter().filter(|c| s(&c["id"]).ends_with(".kernels")).collect();
    assert_eq!(c.len(), 1);
    for c in c {
        assert_eq!(c["confidence"], "Confirmed");
        let st = s(&c["statement"]);
        assert!(st.contains("(median of 4 traced requests): "), "{st}");
        assert!(st.contains(&format!(", {per_run} launches in all")), "{st}");
        assert!(st.contains("no MMVQ, no MMQ"), "{st}");
        assert!(c["sources"].as_array().unwrap().iter().any(|src| src["kind"] == "file"), "{c:#}");
    }
    assert!(text.contains("kernels (per request)"), "{text}");
}

/// A real llama-server (CPU backend) under `sweep --trace`, sent `signal` by this test once the first request has
/// streamed its first token: the server dies of it as it would without the observer, and the request's record
/// carries the observer's crash record, which names the signal and its sender, with a Confirmed claim.
fn llama_server_killed_mid_request_leaves_a_crash_record(signal: libc::c_int, name: &str) {
    let _turn = heavy();
    let (bin, model) = (llama_bin(), tiny_model());
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("backscope.db"), dir.path().join("runs"));
    let mut sweep = start_traced_cpu_sweep(&bin, &model, &db, &runs, "1", "64");
    let started = sweep.wait_for(Duration::from_secs(30), |e| event_is(e, "run_started"));
    let run_dir = PathBuf::from(s(&started["run_dir"]));
    let first = sweep.wait_for(Duration::from_secs(300), |e| event_is(e, "first_token"));
    let pid = first["pid"].as_i64().expect("first_token names the server pid");
    // SAFETY: signalling the llama-server this test's sweep started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, signal) }, 0);
    let (status, events, stderr) = sweep.finish(Duration::from_secs(600));
    assert_eq!(status.code(), Some(1), "a failed cell → exit 1; {stderr}");
    let recs = records(&events);
    let rec = &recs[0];
    assert_eq!((rec["error_class"].as_str(), rec["signal"].as_str()), (Some("crash"), Some(name)), "{rec:#}");
    assert_eq!(rec["signal_source"], "wait status", "the server died of the signal: {rec:#}");
    let t = &rec["trace"];
    let crashes = t["crashes"].as_array().unwrap_or_else(|| panic!("no crash in the trace section: {t:#}"));
    assert_eq!(crashes.len(), 1, "{t:#}");
    let c = &crashes[0];
    assert_eq!(c["signal"], name);
    assert_eq!(c["pid"].as_i64(), Some(pid));
    // Sent by this test (SI_USER), not raised by the CPU.
    assert_eq!((c["code"].as_i64(), c["sender_pid"].as_u64()), (Some(0), Some(u64::from(std::process::id()))));
    assert_eq!(c["fatal"], true);
    let (t0, t1) = (t["window_ns"][0].as_u64().unwrap(), t["window_ns"][1].as_u64().unwrap());
    assert!((t0..=t1).contains(&c["at_ns"].as_u64().unwrap()), "the signal arrived during the request: {t:#}");
    // A CPU server never calls CUDA or HIP: no launch to name, and the handler created the trace file itself.
    assert!(c["threads"][0]["kernels"].as_array().unwrap().is_empty());
    let file = run_dir.join(s(&c["file"]));
    let header: Value = serde_json::from_str(std::fs::read_to_string(&file).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(header["pid"].as_i64(), Some(pid));
    let (claims, text) = report(&db, s(&rec["run_id"]));
    let claim = claims.iter().find(|c| s(&c["id"]).ends_with(".trace_crash")).expect("a trace crash claim");
    assert_eq!(claim["confidence"], "Confirmed");
    let statement = s(&claim["statement"]);
    assert!(statement.contains(&format!("received {name} sent by pid {}", std::process::id())), "{statement}");
    assert!(statement.contains("no CUDA/HIP kernel launch was observed before the crash"), "{statement}");
    assert!(claim["sources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["kind"] == "file" && x["path"] == file.display().to_string()));
    assert!(text.contains(statement), "the report prints the claim: {text}");
}

#[test]
fn a_traced_llama_server_killed_by_sigsegv_mid_request_leaves_a_crash_record() {
    llama_server_killed_mid_request_leaves_a_crash_record(libc::SIGSEGV, "SIGSEGV");
}

#[test]
fn a_traced_llama_server_killed_by_sigabrt_mid_request_leaves_a_crash_record() {
    llama_server_killed_mid_request_leaves_a_crash_record(libc::SIGABRT, "SIGABRT");
}

/// A stand-in server that, on its request, appends amdgpu's timeout lines naming its own pid (ggml-org/llama.cpp#21724's
/// kernel 6.x lines) to the file `BACKSCOPE_KMSG` names, then dies of SIGSEGV: the sweep keeps the lines in the run
/// directory's kernel-log.jsonl, the record carries them beside the observer's crash record, and the report joins them
/// to it. The file stands for /dev/kmsg (writing a GPU driver's lines into the host's real kernel log would tell what
/// watches it of a failure that did not happen).
const KERNEL_STAND_IN: &str = r#"
import http.server, json, os, signal, sys, threading, time
port, kmsg = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        t, pid = time.monotonic_ns() // 1000, os.getpid()
        lines = [
            f"3,7001,{t},-;amdgpu 0000:c2:00.0: ring gfx_0.0.0 timeout, signaled seq=166926, emitted seq=166928\n",
            f"3,7002,{t + 50},-;amdgpu 0000:c2:00.0:  Process llama-server pid {pid} thread llama-server pid {pid}\n",
            f"6,7003,{t + 90},-;amdgpu 0000:c2:00.0: Ring gfx_0.0.0 reset succeeded\n",
        ]
        with open(kmsg, "a") as f:
            f.write("".join(lines))
        time.sleep(0.3)
        # Raised on this thread, which then never answers: as a server's worker that faults mid-request. (os.kill
        # would let this thread return and close the connection while another thread's handler still writes.)
        signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)
        time.sleep(60)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

#[test]
fn the_kernels_lines_naming_the_server_join_its_crash_record() {
    let observer = observer_library();
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("kernel_stand_in.py");
    std::fs::write(&script, KERNEL_STAND_IN).unwrap();
    let kmsg = tmp.path().join("kmsg");
    std::fs::write(&kmsg, "").unwrap();
    let (db, runs) = (tmp.path().join("backscope.db"), tmp.path().join("runs"));
    let server = format!("k=command:{},{{port}},{}", script.display(), kmsg.display());
    let mut cmd = backscope();
    cmd.arg("sweep").arg("--json").arg("--db").arg(&db).arg("--runs-dir").arg(&runs);
    cmd.args(["--server", &server, "--program", "k=python3", "--model", "stand-in", "--repetitions", "1"]);
    cmd.args(["--no-stream", "--trace", "--observer"]).arg(&observer).env("BACKSCOPE_KMSG", &kmsg);
    let (status, events, stderr) = Sweep::spawn(cmd).finish(Duration::from_secs(300));
    assert_eq!(status.code(), Some(1), "a failed cell: {stderr}");
    let run_dir = PathBuf::from(s(&events.iter().find(|e| event_is(e, "run_started")).unwrap()["run_dir"]));
    let recs = records(&events);
    let rec = &recs[0];
    let pid = rec["server"]["pid"].as_u64().unwrap();
    assert_eq!((rec["error_class"].as_str(), rec["signal"].as_str()), (Some("crash"), Some("SIGSEGV")), "{rec:#}");
    let t = &rec["trace"];
    assert_eq!(t["crashes"][0]["pid"].as_u64(), Some(pid), "{t:#}");
    let kernel = t["kernel"].as_array().unwrap_or_else(|| panic!("no kernel lines in the record: {t:#}"));
    let got: Vec<(&str, Option<u64>, Option<u64>)> =
        kernel.iter().map(|l| (s(&l["event"]), l["pid"].as_u64(), l["line"].as_u64())).collect();
    assert_eq!(
        got,
        vec![("ring_timeout", None, Some(2)), ("process", Some(pid), Some(3)), ("reset_succeeded", None, Some(4))]
    );
    let stored = std::fs::read_to_string(run_dir.join("kernel-log.jsonl")).unwrap();
    assert!(stored.lines().nth(2).unwrap().contains(&format!("Process llama-server pid {pid} ")), "{stored}");

    let (claims, text) = report(&db, s(&rec["run_id"]));
    let c = claims.iter().find(|c| s(&c["id"]).ends_with(".trace_kernel")).unwrap_or_else(|| panic!("{claims:#?}"));
    assert_eq!(c["confidence"], "Confirmed");
    let statement = s(&c["statement"]);
    assert!(
        statement.contains(&format!("The kernel's GPU driver reported a GPU job timeout on ring gfx_0.0.0 naming pid {pid} (llama-server), a traced process ("))
            && statement.contains(&format!(" pid {pid}'s crash (SIGSEGV) ("))
            && statement.contains(".trace_crash); the GPU was reset"),
        "{statement}"
    );
    let cited = run_dir.join("kernel-log.jsonl").display().to_string();
    assert!(
        c["sources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["kind"] == "log_line" && x["path"] == cited.as_str() && x["line"] == 3),
        "{c:#}"
    );
    let printed =
        format!("The kernel's GPU driver reported a GPU job timeout on ring gfx_0.0.0 naming pid {pid} (llama-server)");
    assert!(text.contains(&printed), "the report prints the claim: {text}");
}
