//! Sweeps against real llama-servers (llama.cpp 11434, built by `scripts/llama-build.sh vulkan`: CPU backend plus
//! Vulkan, which runs on the CPU through Mesa's lavapipe here) and a real model file (`backscope synth --preset
//! tiny`). Prompts and generation lengths are tiny: decode on lavapipe runs at about 3 tokens/s.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::sweep::*;
use crate::support::util::{backscope, s};

/// Evidence must be addressable: the cited line of the cited file (relative to the run directory) says what the
/// claim quotes.
fn assert_line_exists(run_dir: &Path, file: &str, line: u64, text: &str) {
    let content = std::fs::read_to_string(run_dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let at = content.lines().nth(line as usize - 1).unwrap_or_else(|| panic!("{file} has no line {line}"));
    let quoted = text.trim_end_matches('…');
    assert!(at.trim().starts_with(quoted), "{file}:{line} is {at:?}, the evidence quotes {text:?}");
}

#[test]
fn matched_sweep_cpu_and_vulkan_every_cell_recorded_and_both_backends_identified() {
    let _turn = heavy();
    let (bin, model) = (llama_bin(), tiny_model());
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("backscope.db"), dir.path().join("runs"));
    let args = [
        "--server",
        "cpu=llama-server:--device,none",
        "--server",
        "vulkan=llama-server:--device,Vulkan0",
        "--env",
        "vulkan:GGML_VK_VISIBLE_DEVICES=0",
        "--llama-bin",
        bin.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--num-gpu",
        "0,1,-1",
        "--epochs",
        "2",
        "--num-predict",
        "4",
        "--prompt",
        "Hello",
        "--read-timeout",
        "120",
    ];
    let sweep = Sweep::start(&args, &db, &runs);
    let (status, events, stderr) = sweep.finish(Duration::from_secs(1200));
    assert_eq!(status.code(), Some(0), "all cells should pass; stderr: {stderr}\nevents: {events:#?}");
    let run_dir = std::path::PathBuf::from(s(&events.iter().find(|e| event_is(e, "run_started")).unwrap()["run_dir"]));
    let recs = records(&events);
    assert_eq!(recs.len(), 2 * 3 * 2, "2 endpoints × 3 num_gpu × 2 epochs");
    for r in &recs {
        assert_eq!(r["status"], "ok", "{r:#}");
        assert!(r["decode_tps"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(r["ttft_ms"].as_f64().unwrap() > 0.0);
        assert_eq!(r["server_timings"]["decode_n"], 4);
        assert!(r["server_timings"]["prompt_n"].as_u64().unwrap() >= 1);
        assert_eq!(
            r["server_timings"]["cache_n"], 0,
            "cache_prompt=false: every repetition evaluates the whole prompt"
        );
        assert!(run_dir.join(s(&r["file"])).is_file());
        assert!(run_dir.join(s(&r["log_slice"])).is_file());
        assert!(run_dir.join(s(&r["server"]["log"])).is_file());
        for ev in r["backend"]["evidence"].as_array().unwrap() {
            assert_line_exists(&run_dir, s(&ev["file"]), ev["line"].as_u64().unwrap(), s(&ev["text"]));
        }
    }
    let backend = |ep: &str, ngl: i64| -> Vec<Value> {
        recs.iter().filter(|r| r["endpoint"] == ep && r["num_gpu"] == ngl).map(|r| r["backend"].clone()).collect()
    };
    for ngl in [0, 1, -1] {
        for b in backend("cpu", ngl) {
            assert_eq!(b["backend"], "CPU", "--device none runs on the CPU whatever num_gpu says: {b:#}");
            assert!(b["devices"].as_array().unwrap().is_empty(), "{b:#}");
        }
    }
    for b in backend("vulkan", 0) {
        assert_eq!(b["backend"], "CPU", "num_gpu=0 offloads nothing: {b:#}");
        assert!(s(&b["devices"][0]).starts_with("Vulkan0 (llvmpipe"), "{b:#}");
    }
    for ngl in [1, -1] {
        for b in backend("vulkan", ngl) {
            assert!(s(&b["backend"]).starts_with("Vulkan0 (llvmpipe"), "num_gpu={ngl}: {b:#}");
            let (n, m) = (b["offloaded"][0].as_u64().unwrap(), b["offloaded"][1].as_u64().unwrap());
            assert!(n >= 1 && n <= m, "{b:#}");
            if ngl == 1 {
                assert_eq!(n, 1);
            }
        }
    }
    // llama-server takes -ngl at start: every num_gpu value, in every epoch, is a fresh server.
    let starts: Vec<u64> =
        recs.iter().filter(|r| r["endpoint"] == "vulkan").map(|r| r["server"]["start_no"].as_u64().unwrap()).collect();
    assert_eq!(starts, vec![1, 2, 3, 4, 5, 6]);
    assert!(recs.iter().all(|r| s(&r["server"]["argv"][0]).ends_with("llama-server")));
    // Database, export and run directory agree.
    let run_id = s(&recs[0]["run_id"]).to_string();
    let exported = export(&db, Some(&run_id));
    assert_eq!(exported, recs, "the export holds exactly the records the events reported");
    let env: Value = serde_json::from_slice(&std::fs::read(run_dir.join("env.json")).unwrap()).unwrap();
    assert!(
        s(&env["endpoints"]["vulkan"]["probes"][1]["output"]).contains("Vulkan0"),
        "--list-devices in the snapshot"
    );
    assert_eq!(env["endpoints"]["vulkan"]["env"]["GGML_VK_VISIBLE_DEVICES"], "0");
    // Claims: both backends identified from the logs, with the log lines as sources.
    let out = backscope().args(["sweep", "report", "--json", &run_id, "--db"]).arg(&db).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let claims = report["claims"].as_array().unwrap();
    let backend_claim = |prefix: &str| {
        claims
            .iter()
            .find(|c| s(&c["id"]).starts_with(prefix) && s(&c["id"]).ends_with(".backend"))
            .unwrap_or_else(|| panic!("no {prefix} backend claim: {claims:#?}"))
    };
    // One claim-id scheme for `sweep` and `report`: both show the run floor's one aggregation.
    let vk = backend_claim("report.vulkan.");
    assert_eq!(vk["confidence"], "Confirmed");
    let vk1 = claims
        .iter()
        .find(|c| {
            s(&c["id"]).starts_with("report.vulkan.")
                && s(&c["id"]).contains(".ngl1.")
                && s(&c["id"]).ends_with(".backend")
        })
        .unwrap();
    assert!(s(&vk1["statement"]).contains("ran on Vulkan0 (llvmpipe"), "{vk1:#}");
    assert!(
        vk1["sources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|src| src["kind"] == "log_line" && s(&src["text"]).contains("using device Vulkan0")),
        "{vk1:#}"
    );
    let cpu = backend_claim("report.cpu.");
    assert!(s(&cpu["statement"]).contains("ran on the CPU"), "{cpu:#}");
    // The human report prints the table with both backends.
    // Wide enough that no table cell wraps: the test reads whole cells.
    let text = backscope().env("COLUMNS", "400").args(["sweep", "report", &run_id, "--db"]).arg(&db).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Vulkan0 (llvmpipe") && text.contains("ok 2/2"), "{text}");
}

#[test]
fn a_server_killed_by_sigsegv_mid_stream_is_a_crash_and_the_next_cell_gets_a_fresh_server() {
    let _turn = heavy();
    let (bin, model) = (llama_bin(), tiny_model());
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--server",
        "vk=llama-server:--device,Vulkan0",
        "--env",
        "vk:GGML_VK_VISIBLE_DEVICES=0",
        "--llama-bin",
        bin.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--num-gpu",
        "-1",
        "--repetitions",
        "3",
        "--num-predict",
        "12",
        "--prompt",
        "Hello",
        "--read-timeout",
        "120",
    ];
    let mut sweep = Sweep::start(&args, &dir.path().join("db"), &dir.path().join("runs"));
    // Once the second cell's first token has streamed, the test plays the crashing GPU driver.
    let first = sweep.wait_for(Duration::from_secs(600), |e| event_is(e, "first_token") && e["seq"] == 1);
    let pid = first["pid"].as_i64().expect("first_token names the server pid");
    // SAFETY: signalling the llama-server this test's sweep started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSEGV) }, 0);
    let (status, events, stderr) = sweep.finish(Duration::from_secs(600));
    assert_eq!(status.code(), Some(1), "a failed cell → exit 1; {stderr}");
    let recs = records(&events);
    assert_eq!(recs.len(), 3, "{recs:#?}");
    let crash = &recs[1];
    assert_eq!(crash["error_class"], "crash", "{crash:#}");
    assert_eq!(crash["signal"], "SIGSEGV");
    assert_eq!(crash["signal_source"], "wait status");
    assert_eq!(crash["phase"], "request");
    let (ttft, ttf) = (crash["ttft_ms"].as_f64().unwrap(), crash["ttf_ms"].as_f64().unwrap());
    assert!(ttf >= ttft, "the crash came after the first token: ttft {ttft}, ttf {ttf}");
    assert_eq!(crash["server"]["pid"], pid);
    assert_eq!(recs[0]["status"], "ok");
    assert_eq!(recs[2]["status"], "ok", "the sweep went on: {:#}", recs[2]);
    assert_eq!(recs[2]["server"]["start_no"], 2, "restarted for the next cell");
    assert_ne!(recs[2]["server"]["pid"], pid);
    assert_eq!(recs[0]["server"]["pid"], pid, "cells of one num_gpu share a server until it dies");
    let claims = events.iter().find(|e| event_is(e, "run_finished")).unwrap()["claims"].as_array().unwrap().clone();
    // The timing claim of the crash (the report's: outcome, count, time to failure and its verdict).
    let c = claims.iter().find(|c| s(&c["id"]).ends_with(".timing.1")).expect("a crash timing claim");
    assert!(s(&c["statement"]).starts_with("`vk` at num_gpu=-1: crash SIGSEGV in 1/3 runs after "), "{c:#}");
    assert!(s(&c["statement"]).contains("too few timed crashes to tell (1 timed, 3 needed)"), "{c:#}");
    assert!(c["sources"].as_array().unwrap().iter().any(|x| x["kind"] == "run" && x["file"] == crash["file"]));
}

#[test]
fn resume_after_sigkill_of_backscope_neither_duplicates_nor_loses_records() {
    let _turn = heavy();
    let (bin, model) = (llama_bin(), tiny_model());
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("db"), dir.path().join("runs"));
    // Enough cells that the kill after the third lands mid-sweep although each CPU cell takes only ~0.1 s.
    const CELLS: usize = 24;
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
        &CELLS.to_string(),
        "--num-predict",
        "8",
        "--prompt",
        "Hello",
    ];
    let mut sweep = Sweep::start(&args, &db, &runs);
    let ready = sweep.wait_for(Duration::from_secs(300), |e| event_is(e, "server_ready"));
    let server_pid = ready["pid"].as_i64().unwrap();
    for _ in 0..3 {
        sweep.wait_for(Duration::from_secs(300), |e| event_is(e, "cell_finished"));
    }
    sweep.child.kill().unwrap(); // SIGKILL: no handler runs, no cleanup code.
    let (status, events, _) = sweep.finish(Duration::from_secs(30));
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
    assert!(
        gone_within(server_pid, Duration::from_secs(10)),
        "llama-server {server_pid} outlived a SIGKILLed backscope"
    );
    let before = records(&events);
    let run_id = s(&before[0]["run_id"]).to_string();
    let stored = export(&db, Some(&run_id));
    assert!(stored.len() >= 3 && stored.len() < CELLS, "{} stored", stored.len());
    assert_eq!(&stored[..3], &before[..3], "what was reported is what was stored");
    // Resume the latest run.
    let out = backscope().args(["sweep", "--resume", "--yes", "--quiet", "--db"]).arg(&db).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("run {run_id}: {CELLS} of {CELLS} cells recorded")));
    let after = export(&db, Some(&run_id));
    assert_eq!(after.len(), CELLS, "no cell lost");
    let keys: std::collections::BTreeSet<&str> = after.iter().map(|r| s(&r["cell_key"])).collect();
    assert_eq!(keys.len(), CELLS, "no cell twice");
    assert_eq!(&after[..stored.len()], &stored[..], "records from before the kill are untouched");
    let seqs: Vec<u64> = after.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..CELLS as u64).collect::<Vec<_>>());
    let run_dir = runs.join(&run_id);
    let results = std::fs::read_dir(run_dir.join("cells"))
        .unwrap()
        .filter(|d| d.as_ref().unwrap().path().join("result.json").is_file())
        .count();
    assert_eq!(results, CELLS);
    // The resumed part started its own server, logged under a new name.
    assert!(std::fs::read_dir(run_dir.join("servers")).unwrap().count() >= 2);
}

#[test]
fn llama_server_given_a_missing_model_exits_before_ready_and_each_cell_says_so() {
    let _turn = heavy();
    let bin = llama_bin();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.gguf");
    let out = backscope()
        .args(["sweep", "--json", "--server", "cpu=llama-server:--device,none", "--llama-bin", bin.to_str().unwrap()])
        .args(["--model", missing.to_str().unwrap(), "--repetitions", "2", "--db"])
        .arg(dir.path().join("db"))
        .arg("--runs-dir")
        .arg(dir.path().join("runs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let events: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let recs = records(&events);
    assert_eq!(recs.len(), 2);
    for r in &recs {
        assert_eq!(r["error_class"], "server_exit", "{r:#}");
        assert_eq!(r["phase"], "start");
        assert_ne!(r["exit_code"], 0);
        assert!(s(&r["error"]).contains("before it was ready"), "{r:#}");
        assert!(r["ttf_ms"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn an_external_llama_server_with_its_log_file_is_identified_from_that_log() {
    let _turn = heavy();
    let (bin, model) = (llama_bin(), tiny_model());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("external-server.log");
    let port = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port();
    // Started by the test, not by backscope: an "external" server, as a systemd service would be.
    let log_file = std::fs::File::create(&log).unwrap();
    let mut server = KillOnDrop(
        std::process::Command::new(bin.join("llama-server"))
            .args(["-m", model.to_str().unwrap(), "--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-ngl", "99", "--device", "Vulkan0", "-lv", "4"])
            .env("GGML_VK_VISIBLE_DEVICES", "0")
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("listening on http://") {
        assert!(
            std::time::Instant::now() < deadline && server.0.try_wait().unwrap().is_none(),
            "the external server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The same server twice: through llama-server's own API (detected) and its OpenAI-compatible route.
    let spec = format!(
        "models = [\"tiny\"]\nnum_gpu = [0, 1]\nnum_predict = [2]\n[[prompts]]\ntext = \"Hello\"\n\
         [[endpoints]]\nname = \"ext\"\nurl = \"http://127.0.0.1:{port}\"\nlog_file = \"{log}\"\n\
         [[endpoints]]\nname = \"oai\"\nurl = \"http://127.0.0.1:{port}\"\napi = \"openai\"\n",
        log = log.display()
    );
    let spec_path = dir.path().join("ext.toml");
    std::fs::write(&spec_path, spec).unwrap();
    let sweep =
        Sweep::start(&["--spec", spec_path.to_str().unwrap()], &dir.path().join("db"), &dir.path().join("runs"));
    let (status, events, stderr) = sweep.finish(Duration::from_secs(600));
    drop(server);
    assert_eq!(status.code(), Some(0), "{stderr}");
    let recs = records(&events);
    assert_eq!(recs.len(), 2, "an external llama-server runs as started: one cell per endpoint, not one per num_gpu");
    let oai = &recs[1];
    assert_eq!((oai["status"].as_str(), oai["api"].as_str()), (Some("ok"), Some("openai")), "{oai:#}");
    assert_eq!(oai["server_timings"]["decode_n"], 2, "usage/timings from the OpenAI stream: {oai:#}");
    assert!(oai["ttft_ms"].as_f64().is_some());
    let r = &recs[0];
    assert_eq!(r["api"], "llama.cpp", "detected through /props");
    assert_eq!(r["num_gpu"], -1);
    assert!(s(&r["backend"]["backend"]).starts_with("Vulkan0 (llvmpipe"), "{r:#}");
    assert_eq!(r["backend"]["offloaded"], serde_json::json!([5, 5]));
    for ev in r["backend"]["evidence"].as_array().unwrap() {
        assert_eq!(s(&ev["file"]), log.to_str().unwrap(), "the evidence cites the server's own log");
        assert_line_exists(Path::new("/"), s(&ev["file"]), ev["line"].as_u64().unwrap(), s(&ev["text"]));
    }
    let run_dir = std::path::PathBuf::from(s(&events.iter().find(|e| event_is(e, "run_started")).unwrap()["run_dir"]));
    let slice = std::fs::read_to_string(run_dir.join(s(&r["log_slice"]))).unwrap();
    assert!(slice.contains("prompt eval time"), "the cell's window of the external log: {slice}");
}
