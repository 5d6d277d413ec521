//! `backscope report` end to end on a real sweep: real llama-servers (CPU, and Vulkan on Mesa's lavapipe), a real
//! model file, and real SIGSEGV crashes (the test plays the crashing driver: it kills the Vulkan server after the
//! first token of each of its num_gpu=1 requests). The expected statistics are computed from the exported records
//! by Python's `statistics` module; the HTML is loaded in headless Chromium; the bundle is read back with `tar`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::output::{assert_fits, assert_inert, assert_no_external_reference, load_in_chromium, HOSTILE};
use crate::support::sweep::*;
use crate::support::util::*;

/// A Hugging Face token and a token-shaped value, passed to the servers as environment overrides: the bundle must
/// not carry either.
const HF_TOKEN: &str = "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345";
const TOKEN_SHAPED: &str = "Zq3xT9vB2mL8kR4wY7nP1sD6fH0jC5aE";

/// `python3 -c SCRIPT` with `data` bound to the JSON given; its standard output.
fn python(script: &str, data: &Value) -> String {
    let prog = format!("import json, statistics, sys\ndata = json.loads(sys.argv[1])\n{script}");
    stdout_ok(Command::new("python3").arg("-c").arg(prog).arg(data.to_string())).trim().to_string()
}

/// Every file under `dir`, as paths relative to it.
fn files_under(dir: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

/// Runs the sweep: cpu and vk at num_gpu 0 and 1, three repetitions each; every vk request at num_gpu=1 is
/// killed by SIGSEGV once its first token has streamed. Returns the database, the run id and its directory.
fn crashing_sweep(dir: &Path) -> (PathBuf, String, PathBuf) {
    let (bin, model) = (llama_bin(), tiny_model());
    let (db, runs) = (dir.join("backscope.db"), dir.join("runs"));
    let hf = format!("vk:HF_TOKEN={HF_TOKEN}");
    let shaped = format!("cpu:GGML_BACKSCOPE_TEST_NOTE={TOKEN_SHAPED}");
    let args = [
        "--server",
        "cpu=llama-server:--device,none",
        "--server",
        "vk=llama-server:--device,Vulkan0",
        "--env",
        "vk:GGML_VK_VISIBLE_DEVICES=0",
        "--env",
        &hf,
        "--env",
        &shaped,
        "--llama-bin",
        bin.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--num-gpu",
        "0,1",
        "--repetitions",
        "3",
        "--num-predict",
        "8",
        "--prompt",
        "Hello",
        "--read-timeout",
        "120",
    ];
    let mut sweep = Sweep::start(&args, &db, &runs);
    for _ in 0..3 {
        let e = sweep.wait_for(Duration::from_secs(600), |e| {
            event_is(e, "first_token")
                && e["cell_key"].as_str().is_some_and(|k| k.starts_with("vk|") && k.contains("|ngl=1|"))
        });
        let pid = e["pid"].as_i64().expect("first_token names the server pid");
        // SAFETY: signalling the llama-server this test's sweep started.
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSEGV) }, 0);
    }
    let (status, events, stderr) = sweep.finish(Duration::from_secs(600));
    assert_eq!(status.code(), Some(1), "failed cells exit 1: {stderr}");
    let started = events.iter().find(|e| event_is(e, "run_started")).unwrap();
    (db, s(&started["run_id"]).to_string(), PathBuf::from(s(&started["run_dir"])))
}

#[test]
fn a_real_sweep_with_sigsegv_crashes_gets_its_statistics_documents_and_bundle() {
    let _turn = heavy();
    let dir = tempfile::tempdir().unwrap();
    let (db, run_id, run_dir) = crashing_sweep(dir.path());
    let db_s = db.to_str().unwrap();
    let records: Vec<Value> = export(&db, Some(&run_id));
    assert_eq!(records.len(), 12);
    let crashed: Vec<&Value> = records.iter().filter(|r| r["error_class"] == "crash").collect();
    assert_eq!(crashed.len(), 3, "{records:#?}");
    assert!(crashed.iter().all(|r| r["endpoint"] == "vk" && r["num_gpu"] == 1 && r["signal"] == "SIGSEGV"));

    // The expected crash timing, by Python's statistics module from the stored times to failure.
    let ttf: Vec<f64> = crashed.iter().map(|r| r["ttf_ms"].as_f64().unwrap()).collect();
    let want = python(
        "m = statistics.fmean(data); sd = statistics.stdev(data); cv = sd / m\n\
         print(f'after {m / 1000:.3f} s ± {sd / 1000:.3f} s (CV {cv * 100:.1f}%)')\n\
         print('deterministic, not a race' if cv <= 0.10 else 'variable: a race')",
        &serde_json::json!(ttf),
    );
    let (timing, verdict) = want.split_once('\n').unwrap();
    // The cpu median decode rate at num_gpu=0, as the pivot shows it.
    let cpu0: Vec<f64> = records
        .iter()
        .filter(|r| r["endpoint"] == "cpu" && r["num_gpu"] == 0)
        .map(|r| r["decode_tps"].as_f64().unwrap())
        .collect();
    let cpu0_median = python("print(f'{statistics.median(data):.1f}')", &serde_json::json!(cpu0));

    // Text: the summary, the crash-timing verdict, the pivot and the backends, then the claims.
    let text = stdout_ok(backscope().env("COLUMNS", "160").args(["report", db_s]));
    assert_fits(&text, 160);
    assert!(text.starts_with(&format!("run {run_id} (sweep, finished): 12 cells, 9 ok, 3 failed")), "{text}");
    let verdict_line =
        text.lines().find(|l| l.contains("vk at num_gpu=1: crash SIGSEGV 3/3")).unwrap_or_else(|| panic!("{text}"));
    assert!(verdict_line.contains(timing) && verdict_line.contains(verdict), "want {timing} {verdict}: {verdict_line}");
    let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("no {needle:?} in {text}"));
    assert!(
        at("Crash timing") < at("Matched results")
            && at("Matched results") < at("Backend that served")
            && at("Backend that served") < at("Claims")
    );
    let pivot_row = text.lines().find(|l| l.starts_with("│       0 ┆")).unwrap_or_else(|| panic!("{text}"));
    assert!(pivot_row.contains(&format!(" {cpu0_median} ")), "cpu median {cpu0_median}: {pivot_row}");
    assert!(text.lines().any(|l| l.starts_with("│       1 ┆") && l.contains("crash SIGSEGV 3/3")), "{text}");
    assert!(text.contains("Vulkan0 (llvmpipe") && text.contains("(1/5 layers)"), "the backend from the log: {text}");

    // JSON: the documented schema, the same numbers.
    let v: Value = serde_json::from_str(&stdout_ok(backscope().args(["report", "--json", db_s]))).unwrap();
    assert_eq!(v["schema"], "backscope.report/1");
    assert_eq!((v["cells"].as_u64(), v["ok"].as_u64(), v["failed"].as_u64()), (Some(12), Some(9), Some(3)));
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 4);
    let vk1 = groups.iter().find(|g| g["endpoint"] == "vk" && g["num_gpu"] == 1).unwrap();
    let ft = &vk1["failure_timing"][0];
    assert_eq!((ft["outcome"].as_str(), ft["n"].as_u64()), (Some("crash SIGSEGV"), Some(3)));
    let cv = python("print(statistics.stdev(data) / statistics.fmean(data))", &serde_json::json!(ttf));
    assert!((ft["cv"].as_f64().unwrap() - cv.parse::<f64>().unwrap()).abs() < 1e-9, "{ft:#} vs {cv}");
    assert_eq!(vk1["backends"][0]["offloaded"], serde_json::json!([1, 5]));
    assert!(v["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["metric"] == "decode_tps" && r["num_gpu"] == 0 && r["numerator"] == "vk"));
    let crash_timeline = v["timelines"].as_array().unwrap().iter().find(|t| t["outcome"] == "crash SIGSEGV").unwrap();
    assert_eq!(crash_timeline["crash"]["phase"], "first compute", "each crash hit the first request of a fresh server");
    assert!(s(&crash_timeline["log"]).contains("/servers/s00"), "the whole log of the server that died");
    // The run directory alone gives the same statistics.
    let from_dir: Value =
        serde_json::from_str(&stdout_ok(backscope().args(["report", "--json"]).arg(&run_dir))).unwrap();
    assert_eq!(from_dir["groups"], v["groups"]);
    assert_eq!(from_dir["run"]["run_id"], run_id.as_str());

    // HTML in Chromium: tables and charts, nothing fetched.
    let page = dir.path().join("report.html");
    stdout_ok(backscope().args(["report", db_s, "--format", "html", "-o"]).arg(&page));
    let html = std::fs::read_to_string(&page).unwrap();
    assert_no_external_reference(&html);
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report.png");
    let (dom, requests) = load_in_chromium(&page, &shot);
    assert!(requests.is_empty(), "the report made requests: {requests:?}");
    assert!(dom.matches("<table>").count() >= 6, "{dom}");
    // Charts: decode and prompt t/s by num_gpu, the crash times, a timeline per shown cell.
    assert!(dom.matches("<svg ").count() >= 5, "{dom}");
    assert!(dom.contains("<figcaption>time to failure</figcaption>"), "{dom}");
    assert!(dom.contains("class=\"badge inferred\"") && dom.contains("class=\"badge confirmed\""), "{dom}");
    assert!(!dom.to_lowercase().contains("<script"), "{dom}");

    // Closed pipe.
    let out = run(Command::new("bash")
        .arg("-c")
        .arg("set -o pipefail; \"$0\" report \"$1\" | head -1")
        .arg(env!("CARGO_BIN_EXE_backscope"))
        .arg(&db));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);

    // The bundle, as a directory and as an archive.
    let bundle = dir.path().join("evidence");
    let out = run(backscope().args(["report", db_s, "--bundle"]).arg(&bundle));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("evidence bundle written to"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files = files_under(&bundle);
    for f in [
        "README.md",
        "report.md",
        "report.html",
        "report.json",
        "environment.md",
        "env.json",
        "run.json",
        "discovery.md",
    ] {
        assert!(files.contains(f), "{f} missing: {files:#?}");
    }
    for r in &crashed {
        let cell = Path::new(s(&r["file"])).parent().unwrap().display().to_string();
        for f in [
            s(&r["file"]).to_string(),
            s(&r["log_slice"]).to_string(),
            format!("{cell}/timeline.md"),
            s(&r["server"]["log"]).to_string(),
        ] {
            assert!(files.contains(&f), "{f} missing: {files:#?}");
        }
    }
    let scan_file = files
        .iter()
        .find(|f| f.starts_with("scan/") && f.ends_with(".json"))
        .unwrap_or_else(|| panic!("the llama.cpp bin dir scanned: {files:#?}"));
    let scan: Value = serde_json::from_str(&std::fs::read_to_string(bundle.join(scan_file)).unwrap()).unwrap();
    assert!(
        scan["files"].as_array().unwrap().iter().any(|f| s(&f["path"]).contains("libggml-vulkan.so")),
        "the Vulkan backend library is among the scanned files"
    );
    for f in &files {
        let text = String::from_utf8_lossy(&std::fs::read(bundle.join(f)).unwrap()).into_owned();
        assert!(!text.contains(HF_TOKEN) && !text.contains(TOKEN_SHAPED), "{f} carries a secret");
    }
    let run_json = std::fs::read_to_string(bundle.join("run.json")).unwrap();
    assert!(run_json.contains("vk:HF_TOKEN=[REDACTED]"), "{run_json}");
    let env_json: Value = serde_json::from_str(&std::fs::read_to_string(bundle.join("env.json")).unwrap()).unwrap();
    assert_eq!(env_json["endpoints"]["vk"]["env"]["HF_TOKEN"], "[REDACTED]");
    assert_eq!(env_json["endpoints"]["cpu"]["env"]["GGML_BACKSCOPE_TEST_NOTE"], "[REDACTED]");
    assert_eq!(env_json["endpoints"]["vk"]["env"]["GGML_VK_VISIBLE_DEVICES"], "0", "harmless values stay");
    let environment = std::fs::read_to_string(bundle.join("environment.md")).unwrap();
    assert!(
        environment.contains("ggml_vulkan") || environment.contains("Vulkan0"),
        "--list-devices output: {environment}"
    );
    let discovery = std::fs::read_to_string(bundle.join("discovery.md")).unwrap();
    assert!(discovery.contains("offloaded 1/5 layers"), "{discovery}");
    let archive = dir.path().join("evidence.tar.gz");
    let out = run(backscope().args(["report", db_s, "--bundle"]).arg(&archive));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = stdout_ok(Command::new("tar").arg("-tzf").arg(&archive));
    let root = format!("backscope-evidence-{run_id}/");
    let in_archive: BTreeSet<String> = listed
        .lines()
        .map(|l| l.strip_prefix(&root).unwrap_or_else(|| panic!("{l} outside {root}")).to_string())
        .collect();
    assert_eq!(in_archive, files, "the archive holds what the directory holds");
    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    stdout_ok(Command::new("tar").arg("-xzf").arg(&archive).arg("-C").arg(&unpacked));
    assert_eq!(
        std::fs::read(unpacked.join(&root).join("report.json")).unwrap(),
        std::fs::read(bundle.join("report.json")).unwrap()
    );
    let again = run(backscope().args(["report", db_s, "--bundle"]).arg(&bundle));
    assert_eq!(again.status.code(), Some(2), "a bundle directory is never written over");

    // Hostile names in real records: the run directory copied, its records' endpoint, model and prompt replaced.
    let copy = dir.path().join("hostile-run");
    std::fs::create_dir_all(copy.join("cells")).unwrap();
    for r in &records {
        let mut r = r.clone();
        // Each name varies across the records, so that the tables and the places in words show all three.
        if r["endpoint"] == "vk" {
            r["endpoint"] = HOSTILE.into();
            r["model"] = HOSTILE.into();
        } else {
            r["prompt"] = format!("{HOSTILE} | prompt").into();
        }
        let file = copy.join(s(&r["file"]));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, serde_json::to_vec(&r).unwrap()).unwrap();
    }
    let format = |f: &str| stdout_ok(backscope().env("COLUMNS", "120").args(["report", "--format", f]).arg(&copy));
    let (text, markdown, html) = (format("text"), format("markdown"), format("html"));
    assert_inert(&text, &markdown, &html);
    assert_fits(&text, 120);
    let svgs: Vec<&str> = html.split("<svg ").skip(1).map(|s| &s[..s.find("</svg>").unwrap()]).collect();
    assert!(
        svgs.iter().any(|s| s.contains("&lt;/table&gt;&lt;script")),
        "a chart label carries the hostile name, escaped"
    );
    assert!(svgs.iter().all(|s| !s.contains("<script") && !s.contains('\u{1b}')));
}

/// A HIP program that launches kernels named like ggml's through hipLaunchKernel: `mul_mat_vec_q<Q4_K, 1>` twice
/// and `quantize_q8_1` once (without a GPU the launches fail, and the observer counts them).
const KERNELS: &str = r#"#include <hip/hip_runtime.h>
enum ggml_type { GGML_TYPE_Q4_K = 12 };
template <ggml_type T, int ncols_dst>
__global__ void mul_mat_vec_q(const void* x, float* y) { y[threadIdx.x] = ncols_dst * (int)T; }
__global__ void quantize_q8_1(const float* x, void* y) { }
int main() {
    const void* x = nullptr;
    float* y = nullptr;
    void* args[] = {&x, &y};
    hipLaunchKernel((const void*)mul_mat_vec_q<GGML_TYPE_Q4_K, 1>, dim3(1), dim3(32), args, 0, nullptr);
    hipLaunchKernel((const void*)quantize_q8_1, dim3(1), dim3(32), args, 0, nullptr);
    hipLaunchKernel((const void*)mul_mat_vec_q<GGML_TYPE_Q4_K, 1>, dim3(1), dim3(32), args, 0, nullptr);
    return 0;
}
"#;

#[test]
fn kernels_per_request_of_a_traced_sweep_are_the_medians_of_its_records() {
    let observer = observer_library();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("kernels.hip");
    std::fs::write(&src, KERNELS).unwrap();
    let exe = tmp.path().join("kernels");
    stdout_ok(hipcc().arg("--offload-arch=gfx900").arg(&src).arg("-o").arg(&exe));
    // The sweep tests' stand-in server: llama-server's JSON shape, the program run once per request.
    let (status, events, stderr, db) = crate::support::sweep::traced_stand_in_sweep(tmp.path(), &exe, &observer, 3);
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    let recs = records(&events);
    assert_eq!(recs.len(), 3);
    // The medians per family and of the launch totals, from the records' own trace sections.
    let traces: Vec<Value> = recs.iter().map(|r| r["trace"].clone()).collect();
    let want: Value = serde_json::from_str(&python(
        "fams = sorted({f for t in data for f in t['families']})\n\
         print(json.dumps({'launches': float(statistics.median(t['total_launches'] for t in data)),\n\
                           'families': {f: float(statistics.median(t['families'].get(f, 0) for t in data)) for f in fams}}))",
        &Value::Array(traces),
    ))
    .unwrap();
    assert!(want["launches"].as_f64().unwrap() >= 3.0, "three launches per request: {want}");
    let v: Value = serde_json::from_str(&stdout_ok(backscope().args(["report", "--json"]).arg(&db))).unwrap();
    let k = &v["groups"][0]["kernels"];
    assert_eq!((k["traced"].as_u64(), k["cut"].as_u64()), (Some(3), Some(0)), "{k:#}");
    assert_eq!(k["launches"]["median"].as_f64(), want["launches"].as_f64(), "{k:#}");
    assert_eq!(k["families"], want["families"], "{k:#}");
    let claim = v["claims"].as_array().unwrap().iter().find(|c| s(&c["id"]).ends_with(".kernels")).unwrap();
    assert_eq!(claim["confidence"], "Confirmed");
    assert!(s(&claim["statement"]).contains("kernels per request (median of 3 traced requests)"), "{claim:#}");
    let text = stdout_ok(backscope().env("COLUMNS", "200").args(["report"]).arg(&db));
    assert!(text.contains("Kernels per request (sweep --trace)"), "{text}");
    for (family, n) in want["families"].as_object().unwrap() {
        assert!(text.contains(&format!("{family} {}", n.as_f64().unwrap())), "{family}: {text}");
    }
}
