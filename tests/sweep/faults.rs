//! Endpoints that fail (a peer that closes, answers garbage, an endless or invalid body, or silence; an unknown API; a
//! server that never becomes ready; a taken port; a missing program), without a model: each failure is a record with a
//! clear class and a time to failure, and the sweep records every cell. The peers are protocol-fault injectors
//! (`support::sweep::injector`) and real processes (`python3` that never serves, a missing program). Also the
//! command-line mistakes, dry runs, Ctrl-C and resume, and llama-bench import and export.

use std::time::Duration;

use serde_json::Value;

use crate::support::sweep::*;
use crate::support::util::backscope;

fn class(r: &Value) -> &str {
    r["error_class"].as_str().unwrap_or("ok")
}

#[test]
fn every_protocol_fault_gets_its_class_and_no_cell_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let life = Duration::from_secs(120);
    let close = injector(Fault::CloseAfterAccept, 8, life);
    let garbage = injector(Fault::Garbage, 8, life);
    let huge = injector(Fault::HugeBody, 8, life);
    let invalid = injector(Fault::InvalidJson, 8, life);
    let silent = injector(Fault::Silent, 8, life);
    let refused = {
        // A port nobody listens on: bind, note, release.
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    // `api` is set so that each endpoint's request itself meets the fault (detection is tested below).
    let spec = format!(
        r#"
        models = ["m"]
        num_predict = [4]
        repetitions = 2
        [timeouts]
        read_s = 1.5
        connect_s = 2
        request_s = 20
        [[endpoints]]
        name = "close"
        url = "http://127.0.0.1:{close}"
        api = "llama.cpp"
        [[endpoints]]
        name = "garbage"
        url = "http://127.0.0.1:{garbage}"
        api = "llama.cpp"
        [[endpoints]]
        name = "huge"
        url = "http://127.0.0.1:{huge}"
        api = "ollama"
        [[endpoints]]
        name = "invalid"
        url = "http://127.0.0.1:{invalid}"
        api = "llama.cpp"
        [[endpoints]]
        name = "silent"
        url = "http://127.0.0.1:{silent}"
        api = "llama.cpp"
        [[endpoints]]
        name = "refused"
        url = "http://127.0.0.1:{refused}"
        api = "ollama"
        "#
    );
    let spec_path = dir.path().join("faults.toml");
    std::fs::write(&spec_path, spec).unwrap();
    let sweep = Sweep::start(
        &["--spec", spec_path.to_str().unwrap(), "--no-stream"],
        &dir.path().join("db"),
        &dir.path().join("runs"),
    );
    let (status, events, stderr) = sweep.finish(Duration::from_secs(120));
    assert_eq!(status.code(), Some(1), "some cells failed → exit 1; stderr: {stderr}");
    let recs = records(&events);
    assert_eq!(recs.len(), 12, "every cell recorded: {recs:#?}");
    let by_ep = |name: &str| recs.iter().filter(|r| r["endpoint"] == name).collect::<Vec<_>>();
    for r in by_ep("close") {
        assert!(matches!(class(r), "eof" | "connection_reset"), "{r:#}");
    }
    for r in by_ep("garbage") {
        assert_eq!(class(r), "protocol", "{r:#}");
    }
    for r in by_ep("huge") {
        assert_eq!(class(r), "oversize", "{r:#}");
        assert!(r["body_bytes"].as_u64().unwrap_or(0) <= 64 << 20);
    }
    for r in by_ep("invalid") {
        assert_eq!(class(r), "invalid_response", "{r:#}");
        assert_eq!(r["http_status"], 200);
    }
    for r in by_ep("silent") {
        assert_eq!(class(r), "read_timeout", "{r:#}");
        let ttf = r["ttf_ms"].as_f64().unwrap();
        assert!((1400.0..6000.0).contains(&ttf), "hung for the read timeout, not forever: {ttf}");
    }
    for r in by_ep("refused") {
        assert_eq!(class(r), "connection_refused", "{r:#}");
    }
    for r in &recs {
        assert_eq!(r["status"], "fail");
        assert!(r["ttf_ms"].is_number(), "time to failure recorded: {r:#}");
        assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    // Nothing lost: the database holds the same 12 records, each with its result.json.
    let run_id = recs[0]["run_id"].as_str().unwrap();
    let exported = export(&dir.path().join("db"), Some(run_id));
    assert_eq!(exported.len(), 12);
    let run_dir = events.iter().find(|e| event_is(e, "run_started")).unwrap()["run_dir"].as_str().unwrap().to_string();
    for r in &exported {
        assert!(std::path::Path::new(&run_dir).join(r["file"].as_str().unwrap()).is_file());
    }
    let finished = events.iter().find(|e| event_is(e, "run_finished")).unwrap();
    assert_eq!(finished["cells_failed"], 12);
}

#[test]
fn api_detection_reports_the_fault_of_an_unknown_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = injector(Fault::Garbage, 8, Duration::from_secs(60));
    let invalid = injector(Fault::InvalidJson, 16, Duration::from_secs(60));
    let sweep = Sweep::start(
        &[
            "--endpoint",
            &format!("g=http://127.0.0.1:{garbage}"),
            "--endpoint",
            &format!("j=http://127.0.0.1:{invalid}"),
            "--model",
            "m",
            "--read-timeout",
            "2",
        ],
        &dir.path().join("db"),
        &dir.path().join("runs"),
    );
    let (status, events, _) = sweep.finish(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1));
    let recs = records(&events);
    assert_eq!(recs.len(), 2);
    assert_eq!(class(&recs[0]), "protocol");
    assert!(recs[0]["error"].as_str().unwrap().contains("probing GET /props"), "{:#}", recs[0]);
    assert_eq!(class(&recs[1]), "invalid_response");
    assert!(recs[1]["error"].as_str().unwrap().contains("set `api`"), "{:#}", recs[1]);
}

#[test]
fn a_server_that_never_becomes_ready_is_stopped_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let spec = r#"
        models = ["m"]
        repetitions = 2
        [timeouts]
        grace_s = 1
        [[endpoints]]
        name = "sleeper"
        server = "command"
        program = "python3"
        args = ["-c", "import time; time.sleep(60)", "{port}"]
        ready_timeout_s = 1.5
    "#;
    let spec_path = dir.path().join("s.toml");
    std::fs::write(&spec_path, spec).unwrap();
    let sweep =
        Sweep::start(&["--spec", spec_path.to_str().unwrap()], &dir.path().join("db"), &dir.path().join("runs"));
    let (status, events, stderr) = sweep.finish(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{stderr}");
    let recs = records(&events);
    assert_eq!(recs.len(), 2);
    for r in &recs {
        assert_eq!(class(r), "not_ready", "{r:#}");
        assert_eq!(r["phase"], "start");
        let ttf = r["ttf_ms"].as_f64().unwrap();
        assert!((1400.0..10_000.0).contains(&ttf), "{ttf}");
        let pid = r["server"]["pid"].as_i64().unwrap();
        assert!(gone_within(pid, Duration::from_secs(5)), "the never-ready server {pid} was left running");
    }
    assert_ne!(recs[0]["server"]["pid"], recs[1]["server"]["pid"], "each cell tries a fresh start");
    assert_eq!(recs[1]["server"]["start_no"], 2);
}

#[test]
fn a_missing_program_is_a_spawn_failure_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out = backscope()
        .args([
            "sweep",
            "--quiet",
            "--server",
            "x=llama-server",
            "--llama-bin",
            "/nonexistent/bin",
            "--model",
            "m.gguf",
            "--db",
        ])
        .arg(dir.path().join("db"))
        .arg("--runs-dir")
        .arg(dir.path().join("runs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let recs = export(&dir.path().join("db"), None);
    assert_eq!(recs.len(), 1);
    assert_eq!(class(&recs[0]), "spawn_failed");
    assert!(recs[0]["error"].as_str().unwrap().contains("--llama-bin"), "{:#}", recs[0]);
}

#[test]
fn a_taken_fixed_port_is_port_in_use_and_nothing_is_started() {
    let dir = tempfile::tempdir().unwrap();
    let holder = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = holder.local_addr().unwrap().port();
    let spec = format!(
        r#"
        models = ["m"]
        repetitions = 2
        [[endpoints]]
        name = "fixed"
        server = "command"
        program = "python3"
        args = ["-m", "http.server", "{{port}}", "--bind", "127.0.0.1"]
        port = {port}
    "#
    );
    let spec_path = dir.path().join("p.toml");
    std::fs::write(&spec_path, spec).unwrap();
    let sweep =
        Sweep::start(&["--spec", spec_path.to_str().unwrap()], &dir.path().join("db"), &dir.path().join("runs"));
    let (status, events, _) = sweep.finish(Duration::from_secs(30));
    assert_eq!(status.code(), Some(1));
    let recs = records(&events);
    assert_eq!(recs.len(), 2);
    for r in &recs {
        assert_eq!(class(r), "port_in_use", "{r:#}");
        assert!(r["error"].as_str().unwrap().contains(&format!("127.0.0.1:{port} is already in use")), "{r:#}");
        assert!(r.get("server").is_none(), "no server was started: {r:#}");
    }
    assert!(!events.iter().any(|e| event_is(e, "server_starting")));
    drop(holder);
}

#[test]
fn ctrl_c_stops_the_server_marks_the_run_interrupted_and_resume_continues() {
    let dir = tempfile::tempdir().unwrap();
    let spec = r#"
        models = ["m"]
        repetitions = 2
        [timeouts]
        grace_s = 2
        [[endpoints]]
        name = "sleeper"
        server = "command"
        program = "python3"
        args = ["-c", "import time; time.sleep(60)", "{port}"]
        # Long enough that Ctrl-C lands while the first server still starts on a loaded 2-core machine (at 2 s a
        # fresh CI-like run once recorded the cell as not_ready before the signal came).
        ready_timeout_s = 10
    "#;
    let spec_path = dir.path().join("s.toml");
    std::fs::write(&spec_path, spec).unwrap();
    let (db, runs) = (dir.path().join("db"), dir.path().join("runs"));
    let mut sweep = Sweep::start(&["--spec", spec_path.to_str().unwrap()], &db, &runs);
    sweep.wait_for(Duration::from_secs(20), |e| event_is(e, "server_starting"));
    std::thread::sleep(Duration::from_millis(500));
    let logs =
        std::fs::read_dir(runs.read_dir().unwrap().next().unwrap().unwrap().path().join("servers")).unwrap().count();
    assert_eq!(logs, 1, "one server log while the first server starts");
    // The python server's pid: the only child of backscope besides its watchdog (`backscope-sweep-watchdog`).
    let child_pid: Vec<i64> = children_of(sweep.child.id())
        .into_iter()
        .filter(|p| {
            !std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default().starts_with(b"backscope-sweep-watchdog\0")
        })
        .collect();
    assert_eq!(child_pid.len(), 1, "{child_pid:?}");
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(sweep.child.id() as libc::pid_t, libc::SIGINT) };
    let (status, events, stderr) = sweep.finish(Duration::from_secs(20));
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("--resume"), "says how to continue: {stderr}");
    assert!(gone_within(child_pid[0], Duration::from_secs(5)), "the managed server outlived Ctrl-C");
    assert!(records(&events).is_empty(), "the interrupted cell is not recorded");
    let finished = events.iter().find(|e| event_is(e, "run_finished")).unwrap();
    assert_eq!(finished["status"], "interrupted");
    // Resume runs both cells (each fails not_ready after 10 s) and finishes the run.
    let out = backscope().args(["sweep", "--resume", "--yes", "--quiet", "--db"]).arg(&db).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 of 2 cells recorded"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(export(&db, None).len(), 2);
}

/// Direct children of a process, from /proc.
fn children_of(pid: u32) -> Vec<i64> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i64>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        let Some(rest) = stat.rsplit(')').next() else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1).and_then(|f| f.parse::<u32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

#[test]
fn command_line_mistakes_exit_2_with_what_to_do() {
    let cases: &[(&[&str], &str)] = &[
        (&["sweep"], "nothing to sweep"),
        (&["sweep", "--endpoint", "x=http://127.0.0.1:1"], "no model"),
        (&["sweep", "--resume", "--model", "m"], "drop --spec and the other sweep flags"),
        (&["sweep", "--endpoint", "x"], "NAME=URL"),
        (&["sweep", "--server", "x=vllm", "--model", "m"], "unknown server preset"),
    ];
    for (args, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let out = backscope().args(*args).arg("--db").arg(dir.path().join("db")).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn dry_run_prints_argv_vectors_and_cells() {
    let out = backscope()
        .args([
            "sweep",
            "--dry-run",
            "--server",
            "cpu=llama-server:--device,none",
            "--server",
            "vk=llama-server:--device,Vulkan0",
        ])
        .args([
            "--env",
            "vk:GGML_VK_VISIBLE_DEVICES=0",
            "--llama-bin",
            "/opt/l/bin",
            "--model",
            "tiny.gguf",
            "--num-gpu",
            "0,-1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(
            "/opt/l/bin/llama-server -m tiny.gguf --host 127.0.0.1 --port 0 -ngl 0 -lv 4 --metrics --device none"
        ),
        "{text}"
    );
    assert!(text.contains("GGML_VK_VISIBLE_DEVICES=0 /opt/l/bin/llama-server -m tiny.gguf --host 127.0.0.1 --port 0 -lv 4 --metrics --device Vulkan0"), "{text}");
    assert!(text.contains("4 cells:"), "{text}");
}

#[test]
fn llama_bench_output_imports_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let bench = dir.path().join("bench.jsonl");
    std::fs::write(
        &bench,
        "{\"backends\":\"Vulkan\",\"gpu_info\":\"llvmpipe\",\"model_filename\":\"/m/tiny.gguf\",\"n_gpu_layers\":99,\"n_prompt\":64,\"n_gen\":0,\"n_depth\":0,\"test_time\":\"2026-11-21T12:00:00Z\",\"avg_ns\":1361702127,\"stddev_ns\":1,\"avg_ts\":47.0,\"stddev_ts\":0.5,\"samples_ns\":[1361702127],\"samples_ts\":[47.0]}\n",
    )
    .unwrap();
    let db = dir.path().join("db");
    let out = backscope()
        .args(["sweep", "import"])
        .arg(&bench)
        .arg("--db")
        .arg(&db)
        .arg("--runs-dir")
        .arg(dir.path().join("runs"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recs = export(&db, None);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["source"], "llama-bench");
    assert_eq!(recs[0]["prompt"], "pp64");
    assert_eq!(recs[0]["prompt_tps"], 47.0);
    let rep = backscope().args(["sweep", "report", "--db"]).arg(&db).output().unwrap();
    assert!(
        String::from_utf8_lossy(&rep.stdout).contains("pp64") || String::from_utf8_lossy(&rep.stdout).contains("47.0")
    );
}
